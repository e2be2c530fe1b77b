package gateway

import (
	"bytes"
	"html"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/store"
)

// responseNotRelayed are the store's headers that describe its hop, not the
// answer (fasthttp frames the body itself).
var responseNotRelayed = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Date": true, "Server": true,
	"X-Amz-Request-Id": true,
	// fencegate's attribution metadata stays between fencegate and the store.
	http.CanonicalHeaderKey(store.AttemptHeader): true,
}

// backendAuthCodes are the store's answers that mean fencegate's own backend
// credentials or clock are wrong, never the client's: a client cannot fix them.
var backendAuthCodes = map[string]bool{
	"InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "RequestTimeTooSkewed": true,
}

const maxPeekedError = 64 << 10

// relay streams the store's answer back to the client: status, end-to-end
// headers and body, as the store sent them.
func (s *Server) relay(ctx *fasthttp.RequestCtx, r *request, resp *http.Response) *apiError {
	var peeked []byte
	if resp.StatusCode >= 400 && !ctx.IsHead() {
		// An error document is small: read it to check its code and to give it
		// the gateway's request id (below).
		peeked, _ = io.ReadAll(io.LimitReader(resp.Body, maxPeekedError))
		if code := xmlElement(peeked, "Code"); resp.StatusCode == http.StatusForbidden && backendAuthCodes[code] {
			resp.Body.Close()
			s.deps.Log.Error("the store refused fencegate's own credentials: check --store-access-key, --store-secret-key, --store-region and this host's clock",
				"request_id", r.id, "store_code", code, "store_message", xmlElement(peeked, "Message"))
			return errBackendAuth
		}
	}
	if r.op.ListsBuckets && resp.StatusCode == http.StatusOK {
		var e *apiError
		if peeked, e = visibleBuckets(resp, r.akey, s.hiddenBucket(), r.bucketPage); e != nil {
			return e
		}
	}

	h := &ctx.Response.Header
	h.DisableNormalizing()
	ctx.SetStatusCode(resp.StatusCode)
	for k, vs := range resp.Header {
		if responseNotRelayed[k] {
			continue
		}
		if k == "Content-Type" {
			h.SetContentType(vs[0])
			continue
		}
		if strings.HasPrefix(k, "X-Amz-Meta-") {
			// User metadata names are lower case in S3, and SDKs take the
			// rest of the name as the key as it is; net/http canonicalized
			// the store's names ("x-amz-meta-foo" became "X-Amz-Meta-Foo").
			k = strings.ToLower(k)
		}
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	h.Set("x-amz-request-id", r.id)
	if id := resp.Header.Get("X-Amz-Request-Id"); id != "" {
		h.Set("x-fencegate-store-request-id", id)
	}

	switch {
	case ctx.IsHead():
		resp.Body.Close()
		if cl := resp.Header.Get("Content-Length"); cl != "" {
			if n, err := strconv.ParseInt(cl, 10, 64); err == nil {
				h.SetContentLength(int(n))
			}
		} else if resp.ContentLength >= 0 {
			h.SetContentLength(int(resp.ContentLength))
		}
		ctx.Response.SkipBody = true
	case peeked != nil:
		rest, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := append(peeked, rest...)
		if resp.StatusCode >= 400 {
			// The body names the request by the same id as the header, as
			// S3's clients expect (they log and report either one); the
			// store's own id stays in x-fencegate-store-request-id.
			body = withElement(body, "RequestId", r.id)
		}
		ctx.SetBody(body)
	default:
		r.out = &countingBody{rc: resp.Body, cancel: r.cancelUpstream}
		// A body on the store client's own connection reaches a plain-TCP
		// client by splice(2), never copied through the gateway's memory:
		// fasthttp hands the body stream a writer whose ReadFrom ends in
		// net.TCPConn.ReadFrom (clientConn embeds it). TLS clients get the
		// buffered copy.
		if b, ok := store.Spliceable(resp); ok {
			if _, plain := ctx.Conn().(*clientConn); plain {
				r.out.splice, r.out.spliced = b, s.metrics.splicedBytes
			}
		}
		ctx.SetBodyStream(r.out, int(resp.ContentLength))
	}
	return nil
}

// countingBody counts the bytes relayed to the client; fasthttp closes it when
// the response has been written, which is when the request is logged.
type countingBody struct {
	rc      io.ReadCloser
	n       int64
	cancel  func()
	onClose func(n int64)
	splice  *store.Body        // non-nil: rc, spliced to the client (store/splice.go)
	spliced prometheus.Counter // counts splice's spliced bytes
	// err is why the body broke off after the answer's head had gone (the
	// store paused mid-body, the client stopped taking it): the request's
	// log line says so.
	err error
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	c.n += int64(n)
	return n, err
}

// relayBuffers are large, so a big object crosses the gateway in few reads
// and writes (fasthttp's own copy uses small buffers).
var relayBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// WriteTo is what fasthttp uses to copy a streamed body to the client.
func (c *countingBody) WriteTo(w io.Writer) (int64, error) {
	n, err := c.writeTo(w)
	if err != nil {
		c.err = err
	}
	return n, err
}

func (c *countingBody) writeTo(w io.Writer) (int64, error) {
	if rf, ok := w.(io.ReaderFrom); ok && c.splice != nil {
		n, spliced, err := c.splice.SpliceTo(w, rf)
		c.n += n
		c.spliced.Add(float64(spliced))
		return n, err
	}
	bp := relayBuffers.Get().(*[]byte)
	defer relayBuffers.Put(bp)
	buf := *bp
	var total int64
	for {
		n, rerr := c.rc.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			c.n += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

func (c *countingBody) Close() error {
	err := c.rc.Close()
	if c.cancel != nil {
		c.cancel()
	}
	if c.onClose != nil {
		c.onClose(c.n)
		c.onClose = nil
	}
	return err
}

// xmlElement is the text of the first <name> element in a small XML document.
func xmlElement(doc []byte, name string) string {
	open := []byte("<" + name + ">")
	i := bytes.Index(doc, open)
	if i < 0 {
		return ""
	}
	rest := doc[i+len(open):]
	j := bytes.Index(rest, []byte("</"+name+">"))
	if j < 0 {
		return ""
	}
	return html.UnescapeString(strings.TrimSpace(string(rest[:j])))
}

// withElement puts value, XML-escaped, in place of the text of doc's first
// <name> element; doc is returned as it was when it has none.
func withElement(doc []byte, name, value string) []byte {
	open, closing := "<"+name+">", "</"+name+">"
	i := bytes.Index(doc, []byte(open))
	if i < 0 {
		return doc
	}
	j := bytes.Index(doc[i:], []byte(closing))
	if j < 0 {
		return doc
	}
	out := make([]byte, 0, len(doc)+len(value))
	out = append(out, doc[:i+len(open)]...)
	out = appendXMLEscaped(out, value)
	return append(out, doc[i+j:]...)
}
