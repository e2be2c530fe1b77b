package sigv4

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// S3 error codes produced by this package.
const (
	CodeAccessDenied                      = "AccessDenied"
	CodeInvalidAccessKeyID                = "InvalidAccessKeyId"
	CodeSignatureDoesNotMatch             = "SignatureDoesNotMatch"
	CodeRequestTimeTooSkewed              = "RequestTimeTooSkewed"
	CodeAuthorizationHeaderMalformed      = "AuthorizationHeaderMalformed"
	CodeAuthorizationQueryParametersError = "AuthorizationQueryParametersError"
	CodeXAmzContentSHA256Mismatch         = "XAmzContentSHA256Mismatch"
	CodeBadDigest                         = "BadDigest"
	CodeInvalidDigest                     = "InvalidDigest"
	CodeIncompleteBody                    = "IncompleteBody"
	CodeInvalidArgument                   = "InvalidArgument"
	CodeInvalidRequest                    = "InvalidRequest"
	CodeNotImplemented                    = "NotImplemented"
	CodeMissingSecurityHeader             = "MissingSecurityHeader"
	CodeMalformedTrailerError             = "MalformedTrailerError"
	CodeInternalError                     = "InternalError"
)

// ErrUnknownAccessKey is what a SecretStore returns (or wraps) for an access
// key id it does not know. Verify turns it into InvalidAccessKeyId.
var ErrUnknownAccessKey = errors.New("sigv4: unknown access key")

// ErrNoCredentials is the cause of the AccessDenied error returned for a
// request that carries no authentication at all; the gateway tests for it
// with errors.Is to decide about anonymous access.
var ErrNoCredentials = errors.New("sigv4: request carries no credentials")

// Field is one extra element of an S3 error body (e.g. StringToSign).
type Field struct{ Name, Value string }

// Error is an S3 error: the gateway renders Code, Message and Fields as the
// XML error body and Status as the HTTP status. Messages never contain a
// secret; they may contain what the client itself sent.
type Error struct {
	Code    string
	Status  int
	Message string
	Fields  []Field
	cause   error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap exposes the cause (ErrNoCredentials, a SecretStore error, ...).
func (e *Error) Unwrap() error { return e.cause }

// Field returns the value of the named extra field, or "".
func (e *Error) Field(name string) string {
	for _, f := range e.Fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

func newErr(code string, status int, msg string, fields ...Field) *Error {
	return &Error{Code: code, Status: status, Message: msg, Fields: fields}
}

func errf(code string, status int, format string, a ...any) *Error {
	return newErr(code, status, fmt.Sprintf(format, a...))
}

func errAccessDenied(msg string) *Error { return newErr(CodeAccessDenied, http.StatusForbidden, msg) }

func errHeaderMalformed(format string, a ...any) *Error {
	return errf(CodeAuthorizationHeaderMalformed, http.StatusBadRequest,
		"The authorization header is malformed; "+format, a...)
}

func errQueryMalformed(format string, a ...any) *Error {
	return errf(CodeAuthorizationQueryParametersError, http.StatusBadRequest, format, a...)
}

func errInvalidArgument(msg, name, value string) *Error {
	return newErr(CodeInvalidArgument, http.StatusBadRequest, msg,
		Field{"ArgumentName", name}, Field{"ArgumentValue", value})
}

func errInvalidRequest(format string, a ...any) *Error {
	return errf(CodeInvalidRequest, http.StatusBadRequest, format, a...)
}

func errNotImplemented(msg string) *Error {
	return newErr(CodeNotImplemented, http.StatusNotImplemented, msg)
}

func errIncompleteBody(msg string) *Error {
	return newErr(CodeIncompleteBody, http.StatusBadRequest, msg)
}

func errMalformedTrailer(format string, a ...any) *Error {
	return errf(CodeMalformedTrailerError, http.StatusBadRequest,
		"The request contained trailing data that was not well-formed: "+format, a...)
}

func errBadDigest(what string) *Error {
	return newErr(CodeBadDigest, http.StatusBadRequest,
		"The "+what+" you specified did not match the calculated checksum.")
}

func errChunkSignature() *Error {
	return newErr(CodeSignatureDoesNotMatch, http.StatusForbidden,
		"The chunk signature we calculated does not match the signature you provided.")
}

func errInvalidAccessKey(akid string, cause error) *Error {
	e := newErr(CodeInvalidAccessKeyID, http.StatusForbidden,
		"The AWS Access Key Id you provided does not exist in our records.",
		Field{"AWSAccessKeyId", akid})
	e.cause = cause
	return e
}

func errSkewed(requestTime string, now time.Time, maxSkew time.Duration) *Error {
	return newErr(CodeRequestTimeTooSkewed, http.StatusForbidden,
		"The difference between the request time and the current time is too large.",
		Field{"RequestTime", requestTime},
		Field{"ServerTime", now.UTC().Format(time.RFC3339)},
		Field{"MaxAllowedSkewMilliseconds", strconv.FormatInt(maxSkew.Milliseconds(), 10)})
}
