package gateway

import (
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/gateway/store"
)

// headerView is the one reading of a request's headers that every step uses:
// classification, authorization, the write protocol and forwarding. The
// server keeps header names as sent (sigv4 needs the raw request), so a lookup
// by exact case would miss what the aws cli and boto3 send in lower case;
// nothing may read a request header except through this view.
//
// Names are lower-cased. A name sent more than once (in any case) is merged
// with "," in the order received, exactly as SigV4 canonicalizes it, so the
// value acted on is the value that was signed; where a merged value would mean
// something else than either part (a copy source, a directive, a length), the
// request is refused instead. x-amz-* query parameters (other than a presigned
// URL's own) are S3 headers too (SDK presigners hoist headers into the query):
// they join the view and travel to the store as headers.
type headerView struct {
	fields []headerField // in first-seen order
	index  map[string]int
}

type headerField struct{ name, value string }

// mergeable headers may be repeated: their values are lists.
func mergeable(lower string) bool {
	switch lower {
	case "if-match", "if-none-match", "cache-control", "content-encoding":
		return true
	}
	return strings.HasPrefix(lower, "x-amz-meta-") || strings.HasPrefix(lower, "x-amz-grant-")
}

// readHeaders builds the view, refusing a repeated header that cannot be merged.
func readHeaders(h *fasthttp.RequestHeader, query *fasthttp.Args) (*headerView, *apiError) {
	v := &headerView{fields: make([]headerField, 0, 16), index: make(map[string]int, 16)}
	var refused *apiError
	add := func(name, value string) {
		lower := strings.ToLower(name)
		i, seen := v.index[lower]
		if !seen {
			v.index[lower] = len(v.fields)
			v.fields = append(v.fields, headerField{lower, value})
			return
		}
		if refused == nil && (forwardedHeader(lower) || readByGateway[lower]) && !mergeable(lower) {
			refused = newAPIError("InvalidArgument", http.StatusBadRequest,
				"The header "+lower+" may be sent only once (in any letter case, as a header or a query parameter).")
		}
		v.fields[i].value += "," + value
	}
	for k, val := range h.All() {
		add(string(k), string(val))
	}
	for k, val := range query.All() {
		if name := strings.ToLower(string(k)); strings.HasPrefix(name, "x-amz-") && !presignParams[name] {
			add(name, string(val))
		}
	}
	return v, refused
}

// readByGateway are headers the gateway itself acts on besides forwarding.
var readByGateway = map[string]bool{
	"host": true, "authorization": true, "content-length": true, "transfer-encoding": true,
	"x-amz-date": true, "x-amz-content-sha256": true, "x-amz-decoded-content-length": true,
	"x-amz-trailer": true, "x-amz-security-token": true,
}

// get returns the (merged) value of a header; name is lower case.
func (v *headerView) get(name string) string {
	if i, ok := v.index[name]; ok {
		return v.fields[i].value
	}
	return ""
}

// has reports whether a header was sent with a non-empty value.
func (v *headerView) has(name string) bool { return v.get(name) != "" }

// standardForwarded are the non-x-amz headers S3 acts on: object properties,
// the payload's MD5, conditions and ranges. Nothing else a client sends (its
// cookies, proxies' headers, an Idempotency-Key a transport could act on) reaches
// the store.
var standardForwarded = map[string]bool{
	"content-type": true, "content-encoding": true, "content-disposition": true, "content-language": true,
	"cache-control": true, "expires": true, "content-md5": true,
	"if-match": true, "if-none-match": true, "if-modified-since": true, "if-unmodified-since": true, "range": true,
}

// forwardedHeader reports whether a client's header (lower case) travels to
// the store. x-amz-* headers do, less those that describe the client's own
// signature and framing, which the gateway's replace; sigv4 has refused any
// that were not signed.
func forwardedHeader(lower string) bool {
	if strings.HasPrefix(lower, "x-amz-") {
		return !readByGateway[lower] && lower != store.AttemptHeader
	}
	return standardForwarded[lower]
}

// upstreamName is the name a forwarded header is sent under: user metadata in
// lower case, as S3 stores and returns it; everything else in Go's canonical
// form, so the gateway's own header edits (fence, attempt id) address it.
func upstreamName(lower string) string {
	if strings.HasPrefix(lower, "x-amz-meta-") {
		return lower
	}
	return http.CanonicalHeaderKey(lower)
}

// grantsAccess reports whether the request sets an ACL (a canned ACL or an
// explicit grant): that can make data public at the store, so it needs admin.
func (v *headerView) grantsAccess() bool {
	for _, f := range v.fields {
		if f.name == "x-amz-acl" || strings.HasPrefix(f.name, "x-amz-grant-") {
			return true
		}
	}
	return false
}
