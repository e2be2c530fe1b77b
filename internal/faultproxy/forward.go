package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

const copyBuf = 32 << 10

// upstream is one request's own connection to the store.
type upstream struct {
	conn  net.Conn
	resp  *http.Response
	wrote chan struct{} // closed when the request writer is done with r.Body
	stop  func() bool   // unregisters the close-on-cancel hook
	once  sync.Once
}

// roundTrip dials the store, writes the request (body streamed by a separate
// goroutine, so the store may answer early), and reads the final response's
// head. The caller must call close on the returned upstream.
func (p *HTTP) roundTrip(r *http.Request) (*upstream, error) {
	var d net.Dialer
	conn, err := d.DialContext(r.Context(), "tcp", p.target)
	if err != nil {
		return nil, err
	}
	u := &upstream{conn: conn, wrote: make(chan struct{})}
	// The client went away or the proxy is closing: abort the upstream request.
	u.stop = context.AfterFunc(r.Context(), func() { _ = conn.Close() })
	go func() {
		defer close(u.wrote)
		if err := writeRequest(conn, r); err != nil {
			// Abort: the store sees the connection end before the request
			// is complete.
			_ = conn.Close()
		}
	}()
	br := bufio.NewReaderSize(conn, copyBuf)
	for {
		resp, err := http.ReadResponse(br, r)
		if err != nil {
			u.close()
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			u.close()
			return nil, errors.New("faultproxy: protocol upgrades are not supported")
		case resp.StatusCode/100 == 1:
			continue // interim response; its body is empty
		}
		u.resp = resp
		return u, nil
	}
}

// close closes the upstream connection and waits until the request writer no
// longer touches the request body (it may be blocked reading the client until
// the client sends more or goes away).
func (u *upstream) close() {
	u.once.Do(func() {
		u.stop()
		_ = u.conn.Close()
		<-u.wrote
	})
}

// writeRequest writes r to conn as received: request-target and Host as sent,
// headers, and the body with the same framing.
func writeRequest(conn net.Conn, r *http.Request) error {
	bw := bufio.NewWriterSize(conn, copyBuf)
	_, _ = bw.WriteString(r.Method + " " + r.RequestURI + " HTTP/1.1\r\nHost: " + r.Host + "\r\n")
	if err := r.Header.Write(bw); err != nil {
		return err
	}
	chunked := len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked"
	if chunked {
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
		if len(r.Trailer) > 0 {
			keys := make([]string, 0, len(r.Trailer))
			for k := range r.Trailer {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			_, _ = bw.WriteString("Trailer: " + strings.Join(keys, ", ") + "\r\n")
		}
	}
	_, _ = bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		return err
	}
	switch {
	case chunked:
		return writeChunked(bw, r)
	case r.ContentLength > 0:
		n, err := io.Copy(conn, io.LimitReader(r.Body, r.ContentLength))
		if err != nil {
			return err
		}
		if n < r.ContentLength {
			return errShortBody
		}
	}
	return nil
}

// writeChunked re-chunks r's body, one chunk per read, flushing each, and
// ends it with r's trailers.
func writeChunked(bw *bufio.Writer, r *http.Request) error {
	buf := make([]byte, copyBuf)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			_, _ = bw.WriteString(strconv.FormatInt(int64(n), 16) + "\r\n")
			_, _ = bw.Write(buf[:n])
			_, _ = bw.WriteString("\r\n")
			if ferr := bw.Flush(); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	_, _ = bw.WriteString("0\r\n")
	if err := r.Trailer.Write(bw); err != nil {
		return err
	}
	_, _ = bw.WriteString("\r\n")
	return bw.Flush()
}

// relay copies the store's response to the client, flushing after every
// read, and reports whether the client took it all (as far as its socket
// tells). If the store's body breaks off, the client connection is aborted so
// the client sees the truncation too.
func relay(w http.ResponseWriter, resp *http.Response) bool {
	h := w.Header()
	for k, vv := range resp.Header {
		h[k] = vv
	}
	// A nil entry stops net/http from adding its own.
	for _, k := range []string{"Content-Type", "Date"} {
		if _, ok := resp.Header[k]; !ok {
			h[k] = nil
		}
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, copyBuf)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return false // the client is gone
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	}
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
	return true
}
