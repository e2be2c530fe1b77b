package sigv4

import (
	"net/http"
	"strings"
)

// unsignedAmzHeader finds the first x-amz-* header the signature does not
// cover. S3 refuses such a request: whoever holds a signed request (a presigned
// URL, a captured request replayed) could otherwise add a copy source, metadata,
// tagging or an ACL its signer never asked for. The one exemption S3 makes is
// x-amz-content-sha256 on a presigned URL, which only describes the payload
// (and is verified against it); header auth requires it signed (verifyHeader).
func unsignedAmzHeader(headers []HeaderField, signedHeaders string, presigned bool) (string, bool) {
	for i := range headers {
		name := headers[i].Name
		if len(name) < len("x-amz-") || !strings.EqualFold(name[:len("x-amz-")], "x-amz-") {
			continue
		}
		if presigned && strings.EqualFold(name, "x-amz-content-sha256") {
			continue
		}
		if !signedHeadersContain(signedHeaders, name) {
			return strings.ToLower(name), true
		}
	}
	return "", false
}

// errHeadersNotSigned is S3's answer to an unsigned x-amz-* header.
func errHeadersNotSigned(name string) *Error {
	return newErr(CodeAccessDenied, http.StatusForbidden,
		"There were headers present in the request which were not signed",
		Field{"HeadersNotSigned", name})
}

// Anonymous is the Auth of a request that carries no credentials at all (Verify
// refused it with ErrNoCredentials), for a gateway that lets such a request
// through. Nobody signed it, so its body is checked only against what the
// request declares about itself: x-amz-content-sha256 when it is a hash,
// Content-MD5, x-amz-checksum-* and announced trailers. A signed streaming
// payload needs a signature to chain from and is refused.
func Anonymous(r *Request) (*Auth, error) {
	var h headerScan
	h.scan(r.Headers)
	h.scan(queryBodyHeaders(r.RawQuery)) // as Verify does
	if r.ObjectChecksum {
		h.nChecksum = 0
	}
	a := Auth{Payload: PayloadUnsigned}
	if h.nContentSHA > 0 {
		if h.nContentSHA > 1 {
			return nil, errInvalidArgument("x-amz-content-sha256 is repeated", "x-amz-content-sha256", h.contentSHA)
		}
		mode, sum, e := parsePayloadMode(h.contentSHA)
		if e != nil {
			return nil, e
		}
		if mode == PayloadStreamingSigned || mode == PayloadStreamingSignedTrailer {
			return nil, errAccessDenied("A signed streaming payload needs a signed request.")
		}
		a.Payload, a.payloadHash = mode, sum
	}
	return newAuth(a, &h)
}
