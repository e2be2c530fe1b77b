package sigv4

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// AWS Signature Version 2, as S3 verifies it: the header form
// ("Authorization: AWS AKID:signature") and the presigned query form
// (AWSAccessKeyId, Signature, Expires) that aws cli v1's `s3 presign` and
// boto3's default generate_presigned_url produce. The signature is
// base64(HMAC-SHA1(secret, StringToSign)) over
//
//	Method \n Content-MD5 \n Content-Type \n Date-or-Expires \n
//	CanonicalizedAmzHeaders CanonicalizedResource
//
// It signs no payload: a V2 request's body is checked only by its
// Content-MD5 and x-amz-checksum-* headers, like an UNSIGNED-PAYLOAD one.

// v2SubResources are the query parameters a V2 canonical resource keeps
// (botocore's HmacV1Auth list and S3's documentation); every other parameter
// is unsigned.
var v2SubResources = map[string]bool{
	"accelerate": true, "acl": true, "analytics": true, "cors": true, "defaultObjectAcl": true, "delete": true,
	"encryption": true, "intelligent-tiering": true, "inventory": true, "legal-hold": true, "lifecycle": true,
	"location": true, "logging": true, "metrics": true, "notification": true, "object-lock": true,
	"ownershipControls": true, "partNumber": true, "policy": true, "publicAccessBlock": true,
	"replication": true, "requestPayment": true, "response-cache-control": true,
	"response-content-disposition": true, "response-content-encoding": true, "response-content-language": true,
	"response-content-type": true, "response-expires": true, "restore": true, "retention": true, "select": true,
	"select-type": true, "storageClass": true, "tagging": true, "torrent": true, "uploadId": true,
	"uploads": true, "versionId": true, "versioning": true, "versions": true, "website": true,
}

// v2Params are the presigned V2 query parameters, never part of the resource.
const (
	v2ParamKey       = "AWSAccessKeyId"
	v2ParamSignature = "Signature"
	v2ParamExpires   = "Expires"
)

// StringToSignV2 is the V2 string to sign for r; dateOrExpires is the Date
// line: the Date header's value (empty when x-amz-date is sent, which is
// then among the amz headers), or a presigned URL's Expires.
func StringToSignV2(r *Request, dateOrExpires string) string {
	return stringToSignV2(r, dateOrExpires, false, nil)
}

// stringToSignV2 is StringToSignV2; bucketSlash ends a path-style bucket's
// resource with '/' ("/bucket/"), as botocore signs bucket operations;
// queryAmz are a presigned URL's x-amz-* query parameters, signed among the
// amz headers after the request's own (queryAmz).
func stringToSignV2(r *Request, dateOrExpires string, bucketSlash bool, queryAmz []HeaderField) string {
	hs := r.Headers
	if len(queryAmz) > 0 {
		hs = append(slices.Clip(hs), queryAmz...)
	}
	var b strings.Builder
	b.Grow(128 + len(r.RawPath) + len(r.RawQuery))
	b.WriteString(r.Method)
	b.WriteByte('\n')
	b.WriteString(v2Header(r.Headers, "content-md5"))
	b.WriteByte('\n')
	b.WriteString(v2Header(r.Headers, "content-type"))
	b.WriteByte('\n')
	b.WriteString(dateOrExpires)
	b.WriteByte('\n')
	writeAmzHeadersV2(&b, hs)
	writeResourceV2(&b, r, bucketSlash)
	return b.String()
}

// queryAmz are the x-amz-* parameters of r's query, less a V4 presigned
// URL's own (IsPresignParam): S3 headers to the gateway, which acts on them
// as it does on the request's headers (SDK presigners hoist headers into the
// query). A V2 signature covers them only as amz headers: botocore's
// HmacV1QueryAuth signs a presigned URL's x-amz-* headers, then moves them
// into its query.
func queryAmz(rawQuery string) []HeaderField {
	var out []HeaderField
	for q := rawQuery; q != ""; {
		var part string
		part, q, _ = strings.Cut(q, "&")
		k, val, _ := strings.Cut(part, "=")
		if len(k) < 6 || !strings.EqualFold(k[:6], "x-amz-") && !strings.Contains(k, "%") {
			continue
		}
		name := strings.ToLower(queryUnescape(k))
		if strings.HasPrefix(name, "x-amz-") && !IsPresignParam(name) {
			out = append(out, HeaderField{Name: name, Value: queryUnescape(val)})
		}
	}
	return out
}

// queryBodyHeaders are the x-amz-* query parameters that describe the
// body (its checksum, trailer and decoded length), for headerScan.
func queryBodyHeaders(rawQuery string) []HeaderField {
	q := queryAmz(rawQuery)
	body := q[:0]
	for _, f := range q {
		if f.Name == "x-amz-trailer" || f.Name == "x-amz-decoded-content-length" || checksumFromHeader(f.Name) != ckNone {
			body = append(body, f)
		}
	}
	return body
}

// IsPresignParam reports whether a query parameter (lower case) is part of a
// V4 presigned URL's own signature rather than a hoisted header.
func IsPresignParam(lower string) bool {
	switch lower {
	case "x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-expires",
		"x-amz-signedheaders", "x-amz-signature", "x-amz-security-token":
		return true
	}
	return false
}

// v2Header is a header's value, trimmed, repeated ones joined by ','.
func v2Header(hs []HeaderField, lower string) string {
	var out string
	n := 0
	for _, h := range hs {
		if strings.EqualFold(h.Name, lower) {
			if n > 0 {
				out += ","
			}
			out += strings.TrimSpace(h.Value)
			n++
		}
	}
	return out
}

// writeAmzHeadersV2 writes each x-amz-* header as "name:value\n", names in
// lower case and sorted, a repeated name's values joined by ','.
func writeAmzHeadersV2(b *strings.Builder, hs []HeaderField) {
	var names []string
	values := map[string]string{}
	for _, h := range hs {
		if len(h.Name) < 6 || !strings.EqualFold(h.Name[:6], "x-amz-") {
			continue
		}
		n := strings.ToLower(h.Name)
		v := strings.TrimSpace(h.Value)
		if old, ok := values[n]; ok {
			values[n] = old + "," + v
			continue
		}
		names = append(names, n)
		values[n] = v
	}
	sort.Strings(names)
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte(':')
		b.WriteString(values[n])
		b.WriteByte('\n')
	}
}

// writeResourceV2 writes the canonical resource: "/bucket" for a
// virtual-hosted request, the path as sent, and the sub-resources of the
// query sorted by name with their decoded values.
func writeResourceV2(b *strings.Builder, r *Request, bucketSlash bool) {
	if r.VirtualBucket != "" {
		b.WriteByte('/')
		b.WriteString(r.VirtualBucket)
	}
	b.WriteString(r.RawPath)
	if bucketSlash {
		b.WriteByte('/')
	}
	type kv struct {
		k, v string
		hasV bool
	}
	var subs []kv
	for q := r.RawQuery; q != ""; {
		var part string
		part, q, _ = strings.Cut(q, "&")
		k, v, hasV := strings.Cut(part, "=")
		k = queryUnescape(k)
		if v2SubResources[k] {
			subs = append(subs, kv{k, queryUnescape(v), hasV})
		}
	}
	if len(subs) == 0 {
		return
	}
	sort.SliceStable(subs, func(i, j int) bool { return subs[i].k < subs[j].k })
	for i, s := range subs {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(s.k)
		if s.hasV {
			b.WriteByte('=')
			b.WriteString(s.v)
		}
	}
}

// SignV2 is the V2 signature of stringToSign with secret, in base64.
func SignV2(secret, stringToSign string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(stringToSign))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// pathStyleBucket: the request addresses a bucket path-style, "/bucket"
// without a trailing '/'.
func pathStyleBucket(r *Request) bool {
	return r.VirtualBucket == "" && len(r.RawPath) > 1 && r.RawPath[0] == '/' && strings.IndexByte(r.RawPath[1:], '/') < 0
}

// checkSignatureV2 compares the provided base64 signature with the one
// computed for the request, in constant time. A path-style bucket's
// resource may be signed as "/bucket" or "/bucket/": S3 takes both, and
// botocore signs its bucket operations with the '/'.
func (v *Verifier) checkSignatureV2(r *Request, akid, provided, date string, queryAmz []HeaderField) error {
	secret, e := v.secret(akid)
	if e != nil {
		return e
	}
	got, err := base64.StdEncoding.DecodeString(provided)
	sts := stringToSignV2(r, date, false, queryAmz)
	if err == nil && equalHMACSHA1(secret, sts, got) {
		return nil
	}
	if err == nil && pathStyleBucket(r) && equalHMACSHA1(secret, stringToSignV2(r, date, true, queryAmz), got) {
		return nil
	}
	return newErr(CodeSignatureDoesNotMatch, http.StatusForbidden,
		"The request signature we calculated does not match the signature you provided. Check your key and signing method.",
		Field{"AWSAccessKeyId", akid},
		Field{"StringToSign", sts},
		Field{"SignatureProvided", provided})
}

func equalHMACSHA1(secret, sts string, got []byte) bool {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(sts))
	return subtle.ConstantTimeCompare(m.Sum(nil), got) == 1
}

// msgV2Disabled answers a V2 request when the operator turned V2 off.
var msgV2Disabled = "AWS Signature Version 2 is turned off on this gateway; sign requests with AWS Signature Version 4 (AWS4-HMAC-SHA256)."

// verifyHeaderV2 checks "Authorization: AWS AKID:signature".
func (v *Verifier) verifyHeaderV2(r *Request, h *headerScan) (*Auth, error) {
	if h.nAuth > 1 {
		return nil, errHeaderMalformed("the Authorization header is repeated.")
	}
	cred := strings.TrimSpace(strings.TrimPrefix(h.authorization, "AWS "))
	i := strings.LastIndexByte(cred, ':')
	if i <= 0 || i == len(cred)-1 {
		return nil, errInvalidArgument("AWS authorization header is invalid.  Expected AwsAccessKeyId:signature",
			"Authorization", h.authorization)
	}
	akid, sig := cred[:i], cred[i+1:]
	if e := refuseStreamingV2(h); e != nil {
		return nil, e
	}
	// x-amz-date wins over Date, and then the Date line is empty: the date
	// is signed among the amz headers.
	var t time.Time
	var err error
	dateLine, sent := "", ""
	switch {
	case h.nAmzDate > 0:
		sent = h.amzDate
		t, err = parseV2Date(h.amzDate)
	case h.nDate > 0:
		sent, dateLine = h.date, strings.TrimSpace(h.date)
		t, err = parseV2Date(h.date)
	default:
		return nil, errAccessDenied("AWS authentication requires a valid Date or x-amz-date header")
	}
	if err != nil || t.Before(time.Unix(0, 0)) {
		// A date before the epoch is no valid date to S3: AccessDenied, not
		// RequestTimeTooSkewed (ceph/s3-tests' *_bad_date_before_epoch_aws2).
		return nil, errAccessDenied("AWS authentication requires a valid Date or x-amz-date header")
	}
	now := v.now()
	if d := now.Sub(t); d > v.maxSkew() || d < -v.maxSkew() {
		return nil, errSkewed(sent, now, v.maxSkew())
	}
	// The header signs no query: an x-amz-* parameter there would be acted
	// on as a header nobody signed (a copy source, an ACL).
	if q := queryAmz(r.RawQuery); len(q) > 0 {
		return nil, errAccessDenied("The query parameter " + q[0].Name + " is not covered by an AWS Signature Version 2 Authorization header, which signs no query; send it as a header")
	}
	if err := v.checkSignatureV2(r, akid, sig, dateLine, nil); err != nil {
		return nil, err
	}
	return newAuth(Auth{AccessKeyID: akid, SignatureV2: true, Payload: PayloadUnsigned, Time: t}, h)
}

// refuseStreamingV2: an aws-chunked body's chunk signatures chain from a V4
// seed signature, which a V2 request has not; its framing must not pass as
// the object's bytes.
func refuseStreamingV2(h *headerScan) *Error {
	if h.nContentSHA > 0 && strings.HasPrefix(strings.TrimSpace(h.contentSHA), "STREAMING-") {
		return errInvalidRequest("x-amz-content-sha256 %s needs AWS Signature Version 4", h.contentSHA)
	}
	return nil
}

// parseV2Date reads an HTTP date (RFC 1123, as clients send Date) or the
// ISO 8601 basic form some send as x-amz-date.
func parseV2Date(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(iso8601Basic, s); err == nil {
		return t, nil
	}
	if t, err := http.ParseTime(s); err == nil {
		return t, nil
	}
	// "+0000" in place of "GMT", as S3's documentation's own examples write it.
	return time.Parse("Mon, 02 Jan 2006 15:04:05 -0700", s)
}

// verifyPresignedV2 checks a URL carrying AWSAccessKeyId, Signature and Expires.
func (v *Verifier) verifyPresignedV2(r *Request, h *headerScan) (*Auth, error) {
	var akid, sig, expires string
	seen := 0
	for q := r.RawQuery; q != ""; {
		var part string
		part, q, _ = strings.Cut(q, "&")
		k, val, _ := strings.Cut(part, "=")
		switch queryUnescape(k) {
		case v2ParamKey:
			akid, seen = queryUnescape(val), seen|1
		case v2ParamSignature:
			// A base64 signature has no spaces: a '+' left unescaped is a plus.
			sig, seen = strings.ReplaceAll(queryUnescape(val), " ", "+"), seen|2
		case v2ParamExpires:
			expires, seen = queryUnescape(val), seen|4
		}
	}
	if seen != 7 || akid == "" || sig == "" {
		return nil, errAccessDenied("Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters")
	}
	if e := refuseStreamingV2(h); e != nil {
		return nil, e
	}
	secs, err := strconv.ParseInt(expires, 10, 64)
	if err != nil || secs < 0 {
		return nil, errAccessDenied("Invalid date (should be seconds since epoch): " + expires)
	}
	// Compared as seconds: time.Unix wraps a far Expires (a URL meant never
	// to expire, up to the largest int64) into the past.
	now := v.now()
	if now.Unix() >= secs {
		return nil, newErr(CodeAccessDenied, http.StatusForbidden, "Request has expired",
			Field{"Expires", time.Unix(secs, 0).UTC().Format(time.RFC3339)},
			Field{"ServerTime", now.UTC().Format(time.RFC3339)})
	}
	if err := v.checkSignatureV2(r, akid, sig, expires, queryAmz(r.RawQuery)); err != nil {
		return nil, err
	}
	return newAuth(Auth{AccessKeyID: akid, SignatureV2: true, Presigned: true, Payload: PayloadUnsigned, Time: now}, h)
}
