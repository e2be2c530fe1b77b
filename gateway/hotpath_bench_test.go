package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

// The request hot paths that need no network, measured per request: what a
// small GET and a small PUT cost the gateway before and after the store's
// round trip (and the lease's database round trips, which are not the
// gateway's). Each benchmark checks the result of what it measures, so it
// cannot pass by doing nothing.

// benchAt is the time the recorded requests were signed at; the benchmark
// server's verifier lives at it, so the signatures stay within their skew.
var benchAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// newBenchServer is a Server with what admission, upstream building and
// relaying need, and no listener, store or database.
func newBenchServer(tb testing.TB, log *slog.Logger) *Server {
	tb.Helper()
	if log == nil {
		log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	cfg := Config{Store: store.Config{Endpoint: "http://127.0.0.1:1", AccessKey: "store-key", SecretKey: "store-secret"}}
	cfg.applyDefaults()
	keys, err := newKeyCache(context.Background(), staticKeys{testKey}, log)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := store.New(cfg.Store)
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{cfg: cfg, deps: Deps{Log: log}, metrics: newMetrics(), keys: keys, store: st,
		verifier: &sigv4.Verifier{Secrets: keys, Now: func() time.Time { return benchAt }}}
	s.spool = newSpool(&s.cfg, s.metrics)
	s.bodies = newBodyBudget(cfg.BodyMemory, cfg.BodyMemoryWait, s.metrics)
	return s
}

// recordedRequest is a request as an SDK sends it (aws-sdk-go-v2's headers,
// signed with UNSIGNED-PAYLOAD as the benchmark client does), parsed by
// fasthttp as the server parses it, with body as its stream.
func recordedRequest(tb testing.TB, method, path string, body []byte) *fasthttp.RequestCtx {
	tb.Helper()
	req, err := http.NewRequest(method, "http://127.0.0.1:9000"+path, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("User-Agent", "aws-sdk-go-v2/1.41.0 ua/2.1 os/linux lang/go#1.26 md/GOOS#linux md/GOARCH#amd64 api/s3#1.90.0")
	req.Header.Set("Amz-Sdk-Invocation-Id", "8e1f5ad4-5a0b-4c07-a2c9-0f1e2d3c4b5a")
	req.Header.Set("Amz-Sdk-Request", "attempt=1; max=3")
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	creds := aws.Credentials{AccessKeyID: testKey.ID, SecretAccessKey: testKey.Secret}
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := signer.SignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", benchAt); err != nil {
		tb.Fatal(err)
	}
	var wire bytes.Buffer // the header section is parsed; the body is the stream the caller sets
	if err := req.Write(&wire); err != nil {
		tb.Fatal(err)
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Request.Header.DisableNormalizing()
	if err := ctx.Request.Header.Read(bufio.NewReader(&wire)); err != nil {
		tb.Fatal(err)
	}
	if len(body) > 0 {
		ctx.Request.Header.SetContentLength(len(body))
	}
	return ctx
}

func benchAdmit(b *testing.B, ctx *fasthttp.RequestCtx, s *Server, op, key string) {
	b.Helper()
	check := func() {
		r, e := s.admit(ctx)
		if e != nil {
			b.Fatalf("admit: %v", e)
		}
		if r.op.Name != op || r.key != key || r.auth == nil || r.auth.AccessKeyID != testKey.ID || r.akey == nil {
			b.Fatalf("admitted as %q %q by %+v", r.op.Name, r.key, r.auth)
		}
	}
	check()
	b.ReportAllocs()
	for b.Loop() {
		check()
	}
}

// Routing, header view, classification, SigV4 verification and authorization
// of a GetObject.
func BenchmarkAdmitGet(b *testing.B) {
	s := newBenchServer(b, nil)
	benchAdmit(b, recordedRequest(b, "GET", "/bench/objects/k-000123", nil), s, "GetObject", "objects/k-000123")
}

// The same for a 64 KiB PutObject (its headers only: admission reads no body).
func BenchmarkAdmitPut(b *testing.B) {
	s := newBenchServer(b, nil)
	benchAdmit(b, recordedRequest(b, "PUT", "/bench/objects/k-000123", make([]byte, 64<<10)), s, "PutObject", "objects/k-000123")
}

// The store request of a GetObject: path, query, forwarded headers and
// fencegate's own signature.
func BenchmarkUpstreamGet(b *testing.B) {
	s := newBenchServer(b, nil)
	ctx := recordedRequest(b, "GET", "/bench/objects/k-000123", nil)
	r, e := s.admit(ctx)
	if e != nil {
		b.Fatal(e)
	}
	check := func() {
		u, e := s.buildUpstream(ctx, r)
		if e != nil {
			b.Fatal(e)
		}
		if err := s.store.Sign(u.req, u.payloadHash); err != nil {
			b.Fatal(err)
		}
		if u.req.URL.Opaque != "/bench/objects/k-000123" || u.req.Method != "GET" ||
			!strings.Contains(u.req.Header.Get("Authorization"), "Credential=store-key/") ||
			strings.Contains(u.req.Header.Get("Authorization"), testKey.ID) {
			b.Fatalf("upstream %s %s %v", u.req.Method, u.req.URL.Opaque, u.req.Header)
		}
		u.finish(r)
	}
	check()
	b.ReportAllocs()
	for b.Loop() {
		check()
	}
}

// A 64 KiB PutObject body received into the spool, framed as aws-chunked
// with the gateway's CRC32 trailer for the store, and signed.
func BenchmarkUpstreamPut(b *testing.B) {
	s := newBenchServer(b, nil)
	payload := bytes.Repeat([]byte("fencegate"), (64<<10)/9+1)[:64<<10]
	ctx := recordedRequest(b, "PUT", "/bench/objects/k-000123", payload)
	r, e := s.admit(ctx)
	if e != nil {
		b.Fatal(e)
	}
	src := bytes.NewReader(payload)
	wire := bytes.NewBuffer(make([]byte, 0, 80<<10))
	check := func() {
		src.Reset(payload)
		ctx.Request.SetBodyStream(src, len(payload))
		u, e := s.buildUpstream(ctx, r)
		if e != nil {
			b.Fatal(e)
		}
		if err := s.store.Sign(u.req, u.payloadHash); err != nil {
			b.Fatal(err)
		}
		wire.Reset()
		if _, err := io.Copy(wire, u.req.Body); err != nil {
			b.Fatal(err)
		}
		u.req.Body.Close()
		if int64(wire.Len()) != u.req.ContentLength || u.sentChecksum() == "" ||
			u.req.Header.Get("X-Amz-Decoded-Content-Length") != strconv.Itoa(len(payload)) ||
			!bytes.Contains(wire.Bytes(), payload[:1<<10]) {
			b.Fatalf("upstream body %d bytes of %d, checksum %q", wire.Len(), u.req.ContentLength, u.sentChecksum())
		}
		u.finish(r)
	}
	check()
	b.ReportAllocs()
	for b.Loop() {
		check()
	}
	if held := s.SpooledBytes(); held != 0 {
		b.Fatalf("the spool still holds %d bytes", held)
	}
}

// storeGetHeader is a SeaweedFS GetObject answer's header section.
func storeGetHeader(size int) http.Header {
	h := http.Header{}
	for k, v := range map[string]string{
		"Accept-Ranges": "bytes", "Content-Length": strconv.Itoa(size), "Content-Type": "application/octet-stream",
		"Etag": `"6c5c7e2d1d6f4d3c9a2b0e8f7a6b5c4d"`, "Last-Modified": "Sun, 01 Mar 2026 12:00:00 GMT",
		"Date": "Sun, 01 Mar 2026 12:00:01 GMT", "Server": "SeaweedFS S3", "X-Amz-Request-Id": "1772366401000000000",
		"X-Amz-Meta-Fencegate-Attempt": "0195f0c2-7e41-7b3a-9c1d-2e3f4a5b6c7d", "X-Amz-Meta-Owner": "bench",
	} {
		h.Set(k, v)
	}
	return h
}

// The store's answer to a GetObject relayed to the client: status, headers
// and the body stream, then the body written out. (The store's answer is
// made once: only the relaying is measured.)
func BenchmarkRelayGet(b *testing.B) {
	s := newBenchServer(b, nil)
	ctx := recordedRequest(b, "GET", "/bench/objects/k-000123", nil)
	r, e := s.admit(ctx)
	if e != nil {
		b.Fatal(e)
	}
	body := bytes.Repeat([]byte{'x'}, 64<<10)
	header := storeGetHeader(len(body))
	src := bytes.NewReader(body)
	resp := &http.Response{}
	out := bytes.NewBuffer(make([]byte, 0, 80<<10))
	check := func() {
		ctx.Response.Reset()
		r.out = nil
		src.Reset(body)
		*resp = http.Response{StatusCode: 200, Header: header, ContentLength: int64(len(body)), Body: io.NopCloser(src)}
		if e := s.relay(ctx, r, resp); e != nil {
			b.Fatal(e)
		}
		h := &ctx.Response.Header
		if ctx.Response.StatusCode() != 200 || string(h.Peek("Etag")) != `"6c5c7e2d1d6f4d3c9a2b0e8f7a6b5c4d"` ||
			string(h.Peek("x-amz-meta-owner")) != "bench" || len(h.Peek("x-amz-meta-fencegate-attempt")) != 0 ||
			string(h.Peek("x-amz-request-id")) != r.id || string(h.Peek("x-fencegate-store-request-id")) != "1772366401000000000" {
			b.Fatalf("relayed header:\n%s", h.String())
		}
		out.Reset()
		if _, err := r.out.WriteTo(out); err != nil || out.Len() != len(body) {
			b.Fatalf("relayed %d bytes: %v", out.Len(), err)
		}
		r.out.Close()
	}
	check()
	b.ReportAllocs()
	for b.Loop() {
		check()
	}
}

// countingWriter counts what a log handler writes.
type countingWriter struct{ lines, bytes int }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.lines += bytes.Count(p, []byte{'\n'})
	w.bytes += len(p)
	return len(p), nil
}

// The request's metrics and its one info log line, as fencegate's JSON
// log writes it.
func BenchmarkFinishLogLine(b *testing.B) {
	var w countingWriter
	s := newBenchServer(b, slog.New(slog.NewJSONHandler(&w, nil)))
	ctx := recordedRequest(b, "GET", "/bench/objects/k-000123", nil)
	r, e := s.admit(ctx)
	if e != nil {
		b.Fatal(e)
	}
	ctx.Response.SetStatusCode(200)
	r.out = &countingBody{n: 64 << 10}
	s.finish(ctx, r, nil)
	if w.lines != 1 {
		b.Fatalf("%d log lines for one request", w.lines)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.finish(ctx, r, nil)
	}
	if w.lines != b.N+1 {
		b.Fatalf("%d log lines for %d requests", w.lines, b.N+1)
	}
}
