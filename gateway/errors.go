package gateway

import (
	"encoding/xml"
	"net/http"

	"github.com/valyala/fasthttp"
)

// s3Error is an error answer in S3's XML form.
type s3Error struct {
	Code    string
	Status  int
	Message string
}

var errNotImplemented = s3Error{Code: "NotImplemented", Status: http.StatusNotImplemented,
	Message: "A header or operation you provided implies functionality that is not implemented."}

type xmlError struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string
	Message   string
	Resource  string `xml:",omitempty"`
	RequestID string `xml:"RequestId,omitempty"`
}

// writeError is the one place S3 error bodies are rendered.
func writeError(ctx *fasthttp.RequestCtx, e s3Error) {
	body, _ := xml.Marshal(xmlError{Code: e.Code, Message: e.Message, Resource: string(ctx.Path())})
	ctx.Response.Reset()
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/xml")
	ctx.SetBody(append([]byte(xml.Header), body...))
}
