// Package badinput is a corpus of hostile raw HTTP/1.1 requests for an S3
// endpoint (a fencegate gateway), sent over plain TCP, each with the answers
// it may get: malformed authorization, wrong Content-Length, broken
// aws-chunked framing, oversized and repeated headers, unsigned headers that
// matter, bad XML documents, bad keys, path tricks and request smuggling.
//
// Run sends each case on its own connection and reports a Problem when the
// endpoint misbehaves: a 2xx to an invalid request, a 5xx, an error that is
// not S3 XML, an answer other than those the case allows, no answer and no
// close before the deadline, or a smuggled request that was executed (a
// second answer on the connection, or its object found afterwards). It needs
// only an endpoint and a key that may write one bucket, so both a
// conformance test and a chaos campaign (against gateways under faults) can
// use it; it never depends on testing.T.
//
// The corpus signs its requests itself, byte for byte as they are sent, with
// the canonicalization the gateway's verifier (package sigv4) applies, so that
// each case's bad part is its only one. Its first cases are controls, valid
// requests that must succeed (a PutObject plain, in signed aws-chunked framing
// and with an unsigned trailer, and a DeleteObjects): they prove the signing
// and framing right. Every key the corpus names is under the run's folder
// (Target.Prefix and a random name); Run deletes what the controls wrote and
// aborts the multipart uploads the Complete cases opened.
//
//	results := badinput.Run(ctx, badinput.Target{URL: ..., AccessKey: ..., SecretKey: ..., Bucket: ...}, badinput.Cases())
//	for _, r := range results {
//		if r.Problem != "" { ... }
//	}
package badinput

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/fencegate/fencegate/sigv4"
)

// Target is the endpoint the corpus is sent to.
type Target struct {
	URL                  string // http://host:port of the S3 API
	AccessKey, SecretKey string
	Region               string // "" is us-east-1
	// Bucket is an existing bucket the key may write. The corpus only ever
	// names keys under Prefix in it, and leaves none behind.
	Bucket string
	// Prefix of every key the corpus names ("" is "badinput/"); each Run adds
	// a random folder of its own under it.
	Prefix string
	// Timeout bounds each case, from dial to the server's close (0 is 15 s):
	// a case still open then has hung.
	Timeout time.Duration
	// DuringFaults: the store or the database behind the endpoint may be
	// failing, or the endpoint itself killed, so a case whose request reaches
	// the store or the database may also be answered 500 or 503, and any case
	// may see its connection closed with no answer. Every other rule still
	// holds: no success for an invalid request, no error that is not S3 XML,
	// no hang, no smuggled request executed.
	DuringFaults bool
}

// Answer is one answer a case allows: an S3 XML error of Status with Code
// ("" any code), a 2xx for a control case, or Status 0: the connection
// closed with no answer.
type Answer struct {
	Status int
	Code   string
}

func (a Answer) String() string {
	switch {
	case a.Status == 0:
		return "close"
	case a.Code == "":
		return fmt.Sprint(a.Status)
	}
	return fmt.Sprintf("%d %s", a.Status, a.Code)
}

// Case is one hostile request and what it may be answered.
type Case struct {
	Name string
	// What the request does wrong.
	What string
	// Accept lists the first answers allowed. Any further answer on the
	// connection must be a 4xx S3 error (the bytes after a refused request
	// parsed as garbage), never a success.
	Accept []Answer
	// control: a valid request that must succeed, proving the corpus's own
	// signing and framing are right (so the other cases fail for their bad
	// part only).
	control bool
	// backend: the request may reach the store or the database.
	backend bool
	// smuggled names keys (relative to the run's folder) that a smuggled or
	// refused request would have written: they must not exist afterwards.
	smuggled []string
	// written names keys a control writes, deleted at the end of the run.
	written []string
	method  string // of the first request, for reading its answer ("" PUT)
	build   func(e *env) ([]byte, error)
}

// Control reports a control case: a valid request that must succeed.
func (c Case) Control() bool { return c.control }

// Want renders the accepted answers.
func (c Case) Want() string {
	s := make([]string, len(c.Accept))
	for i, a := range c.Accept {
		s[i] = a.String()
	}
	return strings.Join(s, " | ")
}

// Result is what one case got. Problem is empty when the endpoint behaved.
type Result struct {
	Case    string
	Status  int    // the first answer's status (0: none)
	Code    string // its S3 error code
	Answers int    // answers read on the connection
	Closed  bool   // the connection was closed with no answer
	Took    time.Duration
	// Err: the case could not be run (no connection, its set-up failed);
	// that says nothing about the endpoint's handling of it.
	Err     error
	Problem string
}

func (r Result) String() string {
	s := fmt.Sprintf("%s: %d %s (answers %d, closed %v, %v)", r.Case, r.Status, r.Code, r.Answers, r.Closed, r.Took.Round(time.Millisecond))
	if r.Err != nil {
		s += " error: " + r.Err.Error()
	}
	if r.Problem != "" {
		s += " PROBLEM: " + r.Problem
	}
	return s
}

// Run sends each case on its own connection, one after another, and checks
// its answers; then it checks that no smuggled request left an object and
// cleans up after the controls and the corpus's multipart upload.
func Run(ctx context.Context, t Target, cases []Case) []Result {
	e, err := newEnv(t)
	if err != nil {
		out := make([]Result, len(cases))
		for i, c := range cases {
			out[i] = Result{Case: c.Name, Err: err}
		}
		return out
	}
	defer e.cleanup(ctx)
	out := make([]Result, 0, len(cases))
	for _, c := range cases {
		out = append(out, e.run(ctx, c))
	}
	return out
}

// env is one run: its target, signer and folder.
type env struct {
	t      Target
	addr   string // host:port dialled, and the Host header
	folder string // prefix + run id + "/"
	// uploads are the multipart uploads the run opened, to abort at its end.
	uploads []upload
	// open makes openUpload's upload (tests; nil: through the endpoint).
	open func(name string) (upload, error)
	// written: keys the controls wrote, to delete at the end.
	written []string
}

func newEnv(t Target) (*env, error) {
	u, err := url.Parse(t.URL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("badinput: target URL %q: want http://host:port", t.URL)
	}
	if t.Bucket == "" || t.AccessKey == "" {
		return nil, errors.New("badinput: the target needs a bucket and a key")
	}
	if t.Region == "" {
		t.Region = "us-east-1"
	}
	if t.Prefix == "" {
		t.Prefix = "badinput/"
	}
	if t.Timeout <= 0 {
		t.Timeout = 15 * time.Second
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	return &env{t: t, addr: u.Host, folder: t.Prefix + hex.EncodeToString(id[:]) + "/"}, nil
}

// signer signs at the time of the call (each case is signed just before it is sent).
func (e *env) signer() signer {
	return signer{access: e.t.AccessKey, secret: e.t.SecretKey, region: e.t.Region, now: time.Now()}
}

// key is a key of this run's folder.
func (e *env) key(name string) string { return e.folder + name }

// path is the escaped path-style target of a key (or of the bucket for "").
func (e *env) path(key string) string {
	if key == "" {
		return "/" + e.t.Bucket
	}
	return "/" + e.t.Bucket + "/" + escapePath(key)
}

// escapePath encodes a key as S3 signers do (the gateway's own rule).
func escapePath(s string) string { return string(sigv4.AppendEscapedPath(nil, s)) }

// signed returns a request's headers signed: Host, X-Amz-Date,
// X-Amz-Content-Sha256 (payload), extra, and Authorization last.
func (e *env) signed(method, target, payload string, extra ...hdr) []hdr {
	s := e.signer()
	hs := append([]hdr{{"Host", e.addr}, {"X-Amz-Date", s.date()}, {"X-Amz-Content-Sha256", payload}}, extra...)
	names := signedNames(hs)
	return append(hs, hdr{"Authorization", s.authorization(names, s.signature(method, target, hs, names, payload))})
}

// request is a whole signed request with its body's SHA-256 as the payload hash.
func (e *env) request(method, target string, body []byte, extra ...hdr) []byte {
	hs := e.signed(method, target, sha256Hex(body), append([]hdr{contentLength(len(body))}, extra...)...)
	return wire(method, target, hs, body)
}

func (e *env) run(ctx context.Context, c Case) (res Result) {
	res.Case = c.Name
	start := time.Now()
	defer func() { res.Took = time.Since(start) }()
	raw, err := c.build(e)
	if err != nil {
		res.Err = fmt.Errorf("set-up: %w", err)
		return res
	}
	method := c.method
	if method == "" {
		method = "PUT"
	}
	x := send(ctx, e.addr, raw, method, e.t.Timeout)
	if x.err != nil {
		res.Err = x.err
		return res
	}
	res.Answers = len(x.responses)
	res.Closed = x.closed && len(x.responses) == 0
	if len(x.responses) > 0 {
		res.Status, res.Code = x.responses[0].status, x.responses[0].code
	}
	e.written = append(e.written, c.written...)
	res.Problem = e.judge(c, x)
	if res.Problem == "" {
		res.Problem = e.checkAbsent(ctx, c)
	}
	return res
}

// judge applies the rules to what a case got.
func (e *env) judge(c Case, x exchange) string {
	if x.hung {
		return fmt.Sprintf("no answer and no close within %v after %d answer(s): a hang", e.t.Timeout, len(x.responses))
	}
	if len(x.responses) == 0 {
		for _, a := range c.Accept {
			if a.Status == 0 || e.t.DuringFaults {
				return ""
			}
		}
		return "the connection closed with no answer; want " + c.Want()
	}
	first := x.responses[0]
	if p := e.generic(c, first, true); p != "" {
		return p
	}
	ok := false
	for _, a := range c.Accept {
		if a.Status == first.status && (a.Code == "" || a.Code == first.code) {
			ok = true
		}
	}
	if !ok && !e.faultAnswer(c, first) {
		return fmt.Sprintf("answered %d %s; want %s", first.status, first.code, c.Want())
	}
	for i, r := range x.responses[1:] {
		if r.status < 400 {
			return fmt.Sprintf("answer %d on the connection is %d: bytes after the request were executed as a request (smuggling)", i+2, r.status)
		}
		if p := e.generic(c, r, false); p != "" {
			return fmt.Sprintf("answer %d on the connection: %s", i+2, p)
		}
	}
	return ""
}

// generic: the rules every answer follows.
func (e *env) generic(c Case, r response, first bool) string {
	switch {
	case r.status >= 200 && r.status < 300 && !(c.control && first):
		return fmt.Sprintf("an invalid request was answered %d", r.status)
	case r.status >= 500 && !e.faultAnswer(c, r) && !accepts(c, r):
		return fmt.Sprintf("answered %d %s: a server error for a client's mistake", r.status, r.code)
	case r.status >= 300 && !r.xml && c.method != "HEAD":
		return fmt.Sprintf("answered %d with a body that is not an S3 XML error: %.120q", r.status, r.body)
	}
	return ""
}

func accepts(c Case, r response) bool {
	for _, a := range c.Accept {
		if a.Status == r.status && (a.Code == "" || a.Code == r.code) {
			return true
		}
	}
	return false
}

// faultAnswer: a 500 or 503 allowed while the backend is failing.
func (e *env) faultAnswer(c Case, r response) bool {
	return e.t.DuringFaults && c.backend && (r.status == 500 || r.status == 503)
}

// checkAbsent HEADs the keys a case must not have written.
func (e *env) checkAbsent(ctx context.Context, c Case) string {
	for _, k := range c.smuggled {
		st, err := e.status(ctx, "HEAD", e.path(e.key(k)), nil)
		if err != nil {
			continue // the connection failed: nothing can be said
		}
		if st/100 == 2 {
			return fmt.Sprintf("%s exists: a smuggled or refused request was executed", e.key(k))
		}
	}
	return ""
}

// status sends one valid signed request and returns its answer's status.
func (e *env) status(ctx context.Context, method, target string, body []byte, extra ...hdr) (int, error) {
	r, err := e.do(ctx, method, target, body, extra...)
	return r.status, err
}

func (e *env) do(ctx context.Context, method, target string, body []byte, extra ...hdr) (response, error) {
	x := send(ctx, e.addr, e.request(method, target, body, extra...), method, e.t.Timeout)
	switch {
	case x.err != nil:
		return response{}, x.err
	case len(x.responses) == 0:
		return response{}, errors.New("no answer")
	}
	return x.responses[0], nil
}

// upload is a multipart upload of the run with one part uploaded.
type upload struct{ key, id, etag string }

// openUpload opens a multipart upload of the run's key name and uploads its
// part 1, so that a Complete of it is refused for its document only.
func (e *env) openUpload(name string) (upload, error) {
	if e.open != nil {
		return e.open(name)
	}
	u := upload{key: e.key(name)}
	r, err := e.do(context.Background(), "POST", e.path(u.key)+"?uploads", nil)
	if err != nil {
		return u, err
	}
	i, j := strings.Index(string(r.body), "<UploadId>"), strings.Index(string(r.body), "</UploadId>")
	if r.status != 200 || i < 0 || j < i {
		return u, fmt.Errorf("CreateMultipartUpload: %d %s", r.status, r.code)
	}
	u.id = string(r.body[i+len("<UploadId>") : j])
	e.uploads = append(e.uploads, u)
	r, err = e.do(context.Background(), "PUT", e.path(u.key)+"?partNumber=1&uploadId="+url.QueryEscape(u.id), []byte("part one"))
	if err != nil {
		return u, err
	}
	if r.status != 200 || r.etag == "" {
		return u, fmt.Errorf("UploadPart: %d %s", r.status, r.code)
	}
	u.etag = r.etag
	return u, nil
}

// cleanup aborts the run's upload and deletes what its controls wrote.
func (e *env) cleanup(ctx context.Context) {
	for _, u := range e.uploads {
		_, _ = e.status(ctx, "DELETE", e.path(u.key)+"?uploadId="+url.QueryEscape(u.id), nil)
	}
	for _, k := range e.written {
		_, _ = e.status(ctx, "DELETE", e.path(e.key(k)), nil)
	}
}
