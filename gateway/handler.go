package gateway

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// expect answers `Expect: 100-continue` only after the request is admitted; a
// refused one gets its S3 error instead (not a bare 417) and its connection
// closed, its body never read.
func (s *Server) expect(ctx *fasthttp.RequestCtx) int {
	if ctx.IsOptions() {
		return fasthttp.StatusContinue // a preflight, answered by handle
	}
	r, e := s.admit(ctx)
	if e != nil {
		s.refuse(ctx, r, withClose(e))
		s.corsActual(ctx, r)
		return e.Status
	}
	ctx.SetUserValue(requestStateKey, r)
	return fasthttp.StatusContinue
}

// handle serves every S3 request.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	if ctx.IsOptions() {
		s.preflight(ctx) // a browser's CORS preflight: unsigned, never forwarded (cors.go)
		return
	}
	r, _ := ctx.UserValue(requestStateKey).(*request)
	if headerFold(&ctx.Request.Header, "Origin") != "" {
		// Last of the deferred calls: the answer's head is whole, not sent yet.
		defer func() { s.corsActual(ctx, r) }()
	}
	if r == nil {
		var e *apiError
		if r, e = s.admit(ctx); e != nil {
			if hasBody(ctx) {
				e = withClose(e) // up to 8 KiB of it may be read already; the rest is not
			}
			s.refuse(ctx, r, e)
			return
		}
	}
	id := s.inflight.add(ctx.Conn())
	r.inflightID = id
	defer s.inflight.done(id)
	defer s.releaseBodyMemory(ctx)
	defer func() {
		if p := recover(); p != nil {
			s.deps.Log.Error("panic serving request", "request_id", r.id, "op", r.op.Name, "panic", p)
			writeError(ctx, r.id, withClose(errInternal))
			s.finish(ctx, r, nil)
		}
	}()
	// The operation's own handler (ops.go): the write protocol for a keyed
	// write, multipart or bucket bookkeeping, or a plain pass-through.
	if e := r.op.run(s, ctx, r); e != nil {
		writeError(ctx, r.id, e)
		s.finish(ctx, r, e)
		return
	}
	if r.out != nil {
		// The body streams after the handler returns: log when it is done.
		r.out.onClose = func(int64) { s.finish(ctx, r, nil) }
		return
	}
	s.finish(ctx, r, nil)
}

// hasBody reports whether the request declared a body: a Content-Length
// above 0 or chunked (-1). fasthttp says -2 for a request with neither,
// which has no body.
func hasBody(ctx *fasthttp.RequestCtx) bool {
	n := ctx.Request.Header.ContentLength()
	return n > 0 || n == -1
}

func (s *Server) refuse(ctx *fasthttp.RequestCtx, r *request, e *apiError) {
	writeError(ctx, r.id, e)
	s.finish(ctx, r, e)
}

// finish records the request's metrics and its one log line.
func (s *Server) finish(ctx *fasthttp.RequestCtx, r *request, e *apiError) {
	status := ctx.Response.StatusCode()
	op := r.op.Name
	if op == "" {
		op = "unrouted"
	}
	elapsed := time.Since(r.start)
	var out int64
	var bodyErr error
	if r.out != nil {
		out, bodyErr = r.out.n, r.out.err
	} else if !ctx.Response.IsBodyStream() {
		// A body fencegate wrote whole (an error, a document of its own);
		// a stream's Body() would read it here, before it is sent.
		out = int64(len(ctx.Response.Body()))
	}
	series := s.metrics.series.get(opLabel(r), status)
	series.requests.Inc()
	series.latency.Observe(elapsed.Seconds())
	series.bytesIn.Add(float64(r.bytesIn))
	series.bytesOut.Add(float64(out))
	log := s.deps.Log.Handler()
	if !log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	var room [14]slog.Attr // on the stack: a Record copies them
	attrs := append(room[:0],
		slog.String("request_id", r.id), slog.String("op", op), slog.String("method", methodName(ctx.Method())),
		slog.String("bucket", r.bucket), slog.String("key", r.key), slog.Int("status", status),
		slog.Int64("bytes_in", r.bytesIn), slog.Int64("bytes_out", out),
		slog.Float64("ms", float64(elapsed.Microseconds())/1000), slog.String("remote", ctx.RemoteAddr().String()),
	)
	if r.client != "" {
		attrs = append(attrs, slog.String("client", r.client))
	}
	if r.auth != nil {
		attrs = append(attrs, slog.String("access_key", r.auth.AccessKeyID))
	}
	if e != nil {
		attrs = append(attrs, slog.String("error", e.Code))
	}
	if bodyErr != nil {
		attrs = append(attrs, slog.String("body_error", bodyErr.Error()))
	}
	// Straight to the handler, with no source position: Logger.LogAttrs
	// would walk the stack (runtime.Callers) on every request for a position
	// that is always this line.
	rec := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
	rec.AddAttrs(attrs...)
	_ = log.Handle(ctx, rec)
}

// knownOps are the operation table's names: the only op label values besides
// the fixed ones opLabel adds.
var knownOps = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range OpNames() {
		m[n] = true
	}
	return m
}()

// opLabel is a request's op label on the metrics, from a fixed set: an
// unauthenticated request's method and query are the sender's to choose, and
// each distinct label value is a new series kept for the process's life.
func opLabel(r *request) string {
	switch {
	case r.op.Name == "":
		return "unrouted"
	case r.auth == nil:
		return "unauthenticated"
	case r.op.Unsupported || !knownOps[r.op.Name]:
		return "unsupported"
	}
	return r.op.Name
}

// statusLabel keeps the status label to real HTTP status codes.
func statusLabel(status int) string {
	if status < 100 || status > 599 {
		return "invalid"
	}
	return strconv.Itoa(status)
}
