package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/sigv4"
)

// apiError is an error answer in S3's form: code, status, message and any extra
// elements (StringToSign, RequestTime, ...).
type apiError struct {
	Code    string
	Status  int
	Message string
	Fields  []sigv4.Field
	// closeConn: the request body may still be on the wire unread.
	closeConn bool
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func newAPIError(code string, status int, msg string) *apiError {
	return &apiError{Code: code, Status: status, Message: msg}
}

var (
	errNotImplemented = newAPIError("NotImplemented", http.StatusNotImplemented,
		"A header or operation you provided implies functionality that is not implemented.")
	errAccessDenied         = newAPIError("AccessDenied", http.StatusForbidden, "Access Denied")
	errInvalidBucketName    = newAPIError("InvalidBucketName", http.StatusBadRequest, "The specified bucket is not valid.")
	errInvalidURI           = newAPIError("InvalidURI", http.StatusBadRequest, "Couldn't parse the specified URI.")
	errMissingContentLength = newAPIError("MissingContentLength", http.StatusLengthRequired, "You must provide the Content-Length HTTP header.")
	errMaxMessageLength     = newAPIError("MaxMessageLengthExceeded", http.StatusBadRequest, "Your request was too big.")
	errRequestTimeout       = newAPIError("RequestTimeout", http.StatusBadRequest,
		"Your socket connection to the server was not read from or written to within the timeout period.")
	errInternal       = newAPIError("InternalError", http.StatusInternalServerError, "We encountered an internal error. Please try again.")
	errStoreUnreached = newAPIError("ServiceUnavailable", http.StatusServiceUnavailable, "The store behind the gateway did not answer. Please try again.")
	errBackendAuth    = newAPIError("InternalError", http.StatusInternalServerError,
		"The gateway's own credentials for the store are misconfigured; the operator has been told in the log.")
)

// What fasthttp cannot read (parseError) is answered with S3's codes for it.
var (
	errBadRequest          = newAPIError("BadRequest", http.StatusBadRequest, "An error occurred when parsing the HTTP request.")
	errHeaderSectionTooBig = newAPIError("RequestHeaderSectionTooLarge", http.StatusBadRequest,
		"Your request header section exceeds the maximum allowed size.")
	errIncompleteBody = newAPIError("IncompleteBody", http.StatusBadRequest,
		"You did not provide the number of bytes specified by the Content-Length HTTP header.")
)

// parseError is the S3 server's ErrorHandler: a request fasthttp could not
// read (its request line, its header section, its framing, a body cut short
// before the handler ran) is answered with an S3 XML error like any other
// (W10), not fasthttp's plain text. fasthttp closes the connection after it.
func parseError(ctx *fasthttp.RequestCtx, err error) {
	e := errBadRequest
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		e = errHeaderSectionTooBig
	case errors.As(err, &ne) && ne.Timeout() && !requestBegun(ctx):
		// The header timeout passed on a new connection that sent nothing:
		// a client's spare pooled connection, closed as an idle keep-alive
		// one is, without an answer. One would reach a client that sent no
		// request (Go's transport: "Unsolicited response received on idle
		// HTTP channel"), or one sending its request just then, as that
		// request's answer. fasthttp writes what this handler sets, so the
		// write is made to fail.
		_ = ctx.Conn().SetWriteDeadline(time.Unix(1, 0))
		return
	case errors.As(err, &ne) && ne.Timeout():
		e = errRequestTimeout
	case errors.Is(err, io.ErrUnexpectedEOF):
		e = errIncompleteBody
	}
	writeError(ctx, newRequestID(), withClose(e)) // fasthttp closes after a request it cannot parse
}

// requestBegun reports whether a byte of a request has arrived on ctx's
// connection; true where the connection is not the listener's own.
func requestBegun(ctx *fasthttp.RequestCtx) bool {
	cc := clientConnOf(ctx.Conn())
	return cc == nil || cc.begun
}

// asAPIError turns any error into the S3 answer for it. Errors that are not
// already S3 errors are internal: their text is logged, never sent.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var se *sigv4.Error
	if errors.As(err, &se) {
		return &apiError{Code: se.Code, Status: se.Status, Message: se.Message, Fields: se.Fields}
	}
	return errInternal
}

// writeError answers a request with e. It and rawErrorResponse are the only
// places S3 error answers are made, both through appendErrorXML.
func writeError(ctx *fasthttp.RequestCtx, requestID string, e *apiError) {
	ctx.Response.Reset()
	ctx.Response.Header.DisableNormalizing()
	ctx.SetStatusCode(e.Status)
	ctx.Response.Header.Set("x-amz-request-id", requestID)
	if e.closeConn {
		ctx.SetConnectionClose()
		lingerOnClose(ctx)
	}
	if ctx.IsHead() {
		// A HEAD answer has no body; S3 clients read the status alone.
		return
	}
	ctx.SetContentType("application/xml")
	ctx.SetBody(appendErrorXML(make([]byte, 0, 256), e, string(ctx.Request.URI().PathOriginal()), requestID))
}

// rawErrorResponse is a whole HTTP/1.1 response carrying e, closing the
// connection: for a connection refused before any request was read from it.
func rawErrorResponse(e *apiError, requestID string) []byte {
	body := appendErrorXML(make([]byte, 0, 256), e, "", requestID)
	b := make([]byte, 0, len(body)+192)
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(e.Status)...)
	b = append(b, "\r\nContent-Type: application/xml\r\nConnection: close\r\nx-amz-request-id: "...)
	b = append(b, requestID...)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

// appendErrorXML renders e as S3's XML error document.
func appendErrorXML(b []byte, e *apiError, resource, requestID string) []byte {
	b = append(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n<Error><Code>"...)
	b = appendXMLEscaped(b, e.Code)
	b = append(b, "</Code><Message>"...)
	b = appendXMLEscaped(b, e.Message)
	b = append(b, "</Message>"...)
	for _, f := range e.Fields {
		b = append(b, '<')
		b = append(b, f.Name...)
		b = append(b, '>')
		b = appendXMLEscaped(b, f.Value)
		b = append(b, "</"...)
		b = append(b, f.Name...)
		b = append(b, '>')
	}
	b = append(b, "<Resource>"...)
	b = appendXMLEscaped(b, resource)
	b = append(b, "</Resource><RequestId>"...)
	b = append(b, requestID...)
	return append(b, "</RequestId></Error>"...)
}

// replacementChar is U+FFFD, written for a character XML cannot carry, as
// the store writes it and Go's encoding/xml escapes it.
const replacementChar = "\uFFFD"

// appendXMLEscaped appends s as XML character data: markup escaped, and a
// character XML 1.0 does not allow (a control character, U+FFFE, U+FFFF)
// and each byte that is not UTF-8 written as U+FFFD, so that the document
// parses whatever s holds.
func appendXMLEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '<':
			b = append(b, "&lt;"...)
		case '>':
			b = append(b, "&gt;"...)
		case '&':
			b = append(b, "&amp;"...)
		case '"':
			b = append(b, "&quot;"...)
		case '\'':
			b = append(b, "&apos;"...)
		case '\r', '\n', '\t':
			b = append(b, "&#"...)
			b = strconv.AppendInt(b, int64(c), 10)
			b = append(b, ';')
		default:
			switch {
			case c < 0x20:
				// No XML 1.0 document can carry a control character, not
				// even as a reference: written raw, it made the whole
				// document unparsable to every client.
				b = append(b, replacementChar...)
			case c < utf8.RuneSelf:
				b = append(b, c)
			default:
				r, size := utf8.DecodeRuneInString(s[i:])
				if r == utf8.RuneError && size == 1 || r == 0xFFFE || r == 0xFFFF {
					b = append(b, replacementChar...)
				} else {
					b = append(b, s[i:i+size]...)
				}
				i += size - 1
			}
		}
	}
	return b
}
