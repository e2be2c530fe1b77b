package sigv4

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

type presignKind uint8

const (
	presignNone presignKind = iota
	presignV4
	presignV2
)

// hasPresignParams classifies the query without decoding it in the common
// case where no auth parameter is present.
func hasPresignParams(rawQuery string) presignKind {
	if !strings.Contains(rawQuery, "X-Amz-") && !strings.Contains(rawQuery, "AWSAccessKeyId") {
		return presignNone
	}
	kind := presignNone
	for q := rawQuery; q != ""; {
		var part string
		part, q, _ = strings.Cut(q, "&")
		k, _, _ := strings.Cut(part, "=")
		switch queryUnescape(k) {
		case "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature":
			return presignV4
		case "AWSAccessKeyId":
			kind = presignV2
		}
	}
	return kind
}

// presignParams are the decoded X-Amz-* query parameters.
type presignParams struct {
	algorithm, credential, date, expires, signedHeaders, signature, contentSHA string
	seen                                                                       int
}

const presignRequired = "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."

func parsePresignQuery(rawQuery string) (presignParams, *Error) {
	var p presignParams
	for q := rawQuery; q != ""; {
		var part string
		part, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(part, "=")
		var dst *string
		var bit int
		switch queryUnescape(k) {
		case "X-Amz-Algorithm":
			dst, bit = &p.algorithm, 1
		case "X-Amz-Credential":
			dst, bit = &p.credential, 2
		case "X-Amz-Date":
			dst, bit = &p.date, 4
		case "X-Amz-Expires":
			dst, bit = &p.expires, 8
		case "X-Amz-SignedHeaders":
			dst, bit = &p.signedHeaders, 16
		case "X-Amz-Signature":
			dst, bit = &p.signature, 32
		case "X-Amz-Content-Sha256":
			dst, bit = &p.contentSHA, 64
		default:
			continue
		}
		if p.seen&bit != 0 {
			return p, errQueryMalformed("The %s query parameter is repeated.", queryUnescape(k))
		}
		p.seen |= bit
		*dst = queryUnescape(v)
	}
	if p.seen&1 != 0 && p.algorithm != algorithm {
		if p.algorithm == "AWS4-ECDSA-P256-SHA256" {
			return p, errNotImplemented("AWS Signature Version 4A (AWS4-ECDSA-P256-SHA256) presigned URLs are not supported; sign with AWS4-HMAC-SHA256.")
		}
		return p, errQueryMalformed("X-Amz-Algorithm only supports \"%s\"", algorithm)
	}
	if p.seen&63 != 63 {
		return p, errQueryMalformed(presignRequired)
	}
	return p, nil
}

func (v *Verifier) verifyPresigned(r *Request, h *headerScan) (*Auth, error) {
	p, e := parsePresignQuery(r.RawQuery)
	if e != nil {
		return nil, e
	}
	cred, ok := parseCredential(p.credential)
	if !ok {
		return nil, errQueryMalformed("Error parsing the X-Amz-Credential parameter; " + credentialFormat)
	}
	t, err := time.Parse(iso8601Basic, p.date)
	if err != nil || len(p.date) != len(iso8601Basic) {
		return nil, errQueryMalformed("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
	}
	expires, err := strconv.ParseInt(p.expires, 10, 64)
	switch {
	case err != nil:
		return nil, errQueryMalformed("X-Amz-Expires should be a number")
	case expires < 0:
		return nil, errQueryMalformed("X-Amz-Expires must be non-negative")
	case expires > maxPresignExpires:
		return nil, errQueryMalformed("X-Amz-Expires must be less than a week (in seconds) that is 604800")
	}
	var sig [32]byte
	if !decodeSig(p.signature, &sig) {
		return nil, errQueryMalformed("X-Amz-Signature must be 64 hexadecimal characters")
	}
	if !validSignedHeaders(p.signedHeaders) {
		return nil, errQueryMalformed("X-Amz-SignedHeaders is malformed")
	}
	if e := v.checkScope(&cred, p.date, func(f string, a ...any) *Error {
		return errQueryMalformed("Error parsing the X-Amz-Credential parameter; "+f, a...)
	}); e != nil {
		return nil, e
	}
	if !signedHeadersContain(p.signedHeaders, "host") {
		return nil, errQueryMalformed("X-Amz-SignedHeaders must include 'host'")
	}

	if name, ok := unsignedAmzHeader(r.Headers, p.signedHeaders, true); ok {
		return nil, errHeadersNotSigned(name)
	}

	// Validity runs from X-Amz-Date, not from the skew window; only a URL
	// dated in the future is given the skew allowance.
	now := v.now()
	if t.Sub(now) > v.maxSkew() {
		return nil, errAccessDenied("Request is not valid yet")
	}
	// A URL valid for zero seconds has expired when it arrives: 403, as S3,
	// MinIO and SeaweedFS answer (ceph/s3-tests'
	// test_object_raw_get_x_amz_expires_out_range_zero).
	if end := t.Add(time.Duration(expires) * time.Second); expires == 0 || now.After(end) {
		return nil, newErr(CodeAccessDenied, http.StatusForbidden, "Request has expired",
			Field{"X-Amz-Expires", p.expires},
			Field{"Expires", end.UTC().Format(time.RFC3339)},
			Field{"ServerTime", now.UTC().Format(time.RFC3339)})
	}

	payload := modeUnsigned
	switch {
	case p.seen&64 != 0:
		payload = p.contentSHA
	case h.nContentSHA > 0:
		payload = h.contentSHA
	}
	mode, payloadHash, e := parsePayloadMode(payload)
	if e != nil {
		return nil, e
	}
	key, err := v.checkSignature(r, &cred, p.date, p.signedHeaders, payload, "X-Amz-Signature", &sig, p.signature)
	if err != nil {
		return nil, err
	}
	return newAuth(Auth{
		AccessKeyID: cred.akid,
		Presigned:   true,
		Payload:     mode,
		Region:      cred.region,
		Time:        t,
		payloadHash: payloadHash,
		signingKey:  key,
		seed:        sig,
		amzDate:     p.date,
		scope:       cred.scope,
	}, h)
}
