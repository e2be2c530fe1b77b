package sigv4

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

const (
	exampleAKID   = "AKIAIOSFODNN7EXAMPLE"
	exampleSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

var exampleTime = time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC)

type secrets map[string]string

func (s secrets) SecretKey(id string) (string, error) {
	if v, ok := s[id]; ok {
		return v, nil
	}
	return "", ErrUnknownAccessKey
}

func testVerifier(now time.Time) *Verifier {
	return &Verifier{
		Secrets: secrets{exampleAKID: exampleSecret},
		Region:  "us-east-1",
		Now:     func() time.Time { return now },
	}
}

// fromHTTP adapts a signed net/http request the way the gateway adapts its
// server's requests.
func fromHTTP(req *http.Request) *Request {
	r := &Request{Method: req.Method, Host: req.Host, RawPath: req.URL.EscapedPath(), RawQuery: req.URL.RawQuery}
	if r.Host == "" {
		r.Host = req.URL.Host
	}
	r.Headers = append(r.Headers, HeaderField{"Host", r.Host})
	for k, vs := range req.Header {
		for _, v := range vs {
			r.Headers = append(r.Headers, HeaderField{k, v})
		}
	}
	if req.ContentLength > 0 && req.Header.Get("Content-Length") == "" {
		r.Headers = append(r.Headers, HeaderField{"Content-Length", strconv.FormatInt(req.ContentLength, 10)})
	}
	return r
}

func (r *Request) clone() *Request {
	c := *r
	c.Headers = append([]HeaderField(nil), r.Headers...)
	return &c
}

func (r *Request) set(name, value string) *Request {
	for i := range r.Headers {
		if http.CanonicalHeaderKey(r.Headers[i].Name) == http.CanonicalHeaderKey(name) {
			r.Headers[i].Value = value
			return r
		}
	}
	r.Headers = append(r.Headers, HeaderField{name, value})
	return r
}

func (r *Request) del(name string) *Request {
	out := r.Headers[:0]
	for _, h := range r.Headers {
		if http.CanonicalHeaderKey(h.Name) != http.CanonicalHeaderKey(name) {
			out = append(out, h)
		}
	}
	r.Headers = out
	return r
}

func wantCode(t *testing.T, err error, code string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want %s error, got %v", code, err)
	}
	if e.Code != code {
		t.Fatalf("want code %s, got %s (%s)", code, e.Code, e.Message)
	}
	return e
}

// readBody reads b in reads of size step and returns the bytes yielded
// before the first error and that error (nil at io.EOF).
func readBody(b io.Reader, step int) ([]byte, error) {
	var out []byte
	buf := make([]byte, step)
	for {
		n, err := b.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}
