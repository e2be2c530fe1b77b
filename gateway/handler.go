package gateway

import (
	"strconv"

	"github.com/valyala/fasthttp"
)

// handle answers every S3 request. Until pass-through lands, the S3 listener
// answers its own health check and refuses everything else with S3's
// NotImplemented error, so no client mistakes it for a working store.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	op := "unsupported"
	if string(ctx.Path()) == "/healthz" && ctx.IsGet() {
		op = "healthz"
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetBodyString("ok\n")
	} else {
		writeError(ctx, errNotImplemented)
	}
	s.metrics.requests.WithLabelValues(op, strconv.Itoa(ctx.Response.StatusCode())).Inc()
}
