package gateway

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"

	"github.com/fencegate/fencegate/sigv4"
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
// they join the view and travel to the store as headers. Every signature
// covers them: V4's the whole query, a presigned V2 URL's among its amz
// headers, and a V2 Authorization header, which signs no query, is refused
// with any (sigv4/v2.go).
type headerView struct {
	fields []headerField // in first-seen order
	// raw are the headers as received, names in their own case and repeats
	// kept: what the signature covers (sigv4.Request.Headers).
	raw []sigv4.HeaderField
	// Most requests carry fewer headers than these hold, so the view costs no
	// allocation beyond the request it is part of. (A linear search of a
	// dozen names is cheaper than building a map per request.)
	fieldsBuf [16]headerField
	rawBuf    [16]sigv4.HeaderField
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

// headerBytes is the room read needs in its arena: every name twice (as
// sent and lower-cased) and every value.
func headerBytes(h *fasthttp.RequestHeader, query *fasthttp.Args) int {
	n := 0
	for k, val := range h.All() {
		n += 2*len(k) + len(val)
	}
	for k, val := range query.All() {
		if hasPrefixFold(k, "x-amz-") {
			n += len(k) + len(val)
		}
	}
	return n
}

// read fills the view (which must be empty) from h and query, cutting every
// string it keeps from a; it refuses a repeated header that cannot be merged.
func (v *headerView) read(h *fasthttp.RequestHeader, query *fasthttp.Args, a *stringArena) *apiError {
	v.fields, v.raw = v.fieldsBuf[:0], v.rawBuf[:0]
	var refused *apiError
	add := func(lower, value string) {
		i := v.index(lower)
		if i < 0 {
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
		name, value := a.add(k), a.add(val)
		v.raw = append(v.raw, sigv4.HeaderField{Name: name, Value: value})
		add(a.lower(name), value)
	}
	for k, val := range query.All() {
		if !hasPrefixFold(k, "x-amz-") {
			continue
		}
		if name := a.lower(a.add(k)); !sigv4.IsPresignParam(name) {
			if e := storeHeaderRefusal("query parameter", name, string(val)); e != nil && refused == nil {
				refused = e
			}
			add(name, a.add(val))
		}
	}
	return refused
}

// storeHeaderRefusal refuses a header that the gateway would send to the
// store but that did not arrive as a header (a query parameter, a POST
// form's field), whose name or value HTTP cannot carry: a CR or LF, another
// control character, a name that is no token. Sent on, Go would rewrite it
// after fencegate signed the store request, and the store's refusal of that
// signature would read as fencegate's own credentials being wrong.
func storeHeaderRefusal(what, name, value string) *apiError {
	if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
		return newAPIError("InvalidArgument", http.StatusBadRequest,
			"The "+what+" "+strconv.Quote(name)+" is a header whose name or value an HTTP header cannot carry (a line break, a control character, a space in the name).")
	}
	return nil
}

// index is the position of the header name (lower case) in fields, or -1.
func (v *headerView) index(name string) int {
	for i := range v.fields {
		if v.fields[i].name == name {
			return i
		}
	}
	return -1
}

// hasPrefixFold reports whether b starts with prefix (lower case ASCII) in
// any letter case.
func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}

// stringArena copies the short strings of one request's header section into
// one allocation. A string it returned stays valid and unchanged: the
// builder only ever appends.
type stringArena struct{ b strings.Builder }

func (a *stringArena) grow(n int) { a.b.Grow(n) }

// add copies p into the arena.
func (a *stringArena) add(p []byte) string {
	start := a.b.Len()
	a.b.Write(p)
	return a.b.String()[start:]
}

// lower is s in lower case: s itself when it has no upper-case letter, else
// a lower-cased copy in the arena. Only ASCII is folded here; anything else
// goes to strings.ToLower as before.
func (a *stringArena) lower(s string) string {
	upper := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return strings.ToLower(s)
		}
		upper = upper || 'A' <= c && c <= 'Z'
	}
	if !upper {
		return s
	}
	start := a.b.Len()
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		a.b.WriteByte(c)
	}
	return a.b.String()[start:]
}

// readByGateway are headers the gateway itself acts on besides forwarding.
var readByGateway = map[string]bool{
	"host": true, "authorization": true, "content-length": true, "transfer-encoding": true,
	"x-amz-date": true, "x-amz-content-sha256": true, "x-amz-decoded-content-length": true,
	"x-amz-trailer": true, "x-amz-security-token": true,
}

// get returns the (merged) value of a header; name is lower case.
func (v *headerView) get(name string) string {
	if i := v.index(name); i >= 0 {
		return v.fields[i].value
	}
	return ""
}

// has reports whether a header was sent with a non-empty value.
func (v *headerView) has(name string) bool { return v.get(name) != "" }

// upstreamName is the name a forwarded header is sent under: user metadata in
// lower case, as S3 stores and returns it; everything else in Go's canonical
// form, so the gateway's own header edits (fence, attempt id) address it.
func upstreamName(lower string) string {
	if strings.HasPrefix(lower, "x-amz-meta-") {
		return lower
	}
	if n, ok := canonicalNames[lower]; ok {
		return n
	}
	return http.CanonicalHeaderKey(lower)
}

// canonicalNames are the canonical forms of the headers most requests
// forward, made once rather than per request.
var canonicalNames = func() map[string]string {
	m := map[string]string{}
	for n := range toStore {
		m[n] = http.CanonicalHeaderKey(n)
	}
	return m
}()

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

// headerFold is every value of the header name, matched in any letter case
// (the server keeps names as sent: HTTP/2-speaking proxies send them in lower
// case), joined by ",".
func headerFold(h *fasthttp.RequestHeader, name string) string {
	var out string
	for k, v := range h.All() {
		if len(k) == len(name) && hasPrefixFold(k, name) {
			if out != "" {
				out += ","
			}
			out += string(v)
		}
	}
	return out
}

// canonicalExpect renames an Expect header sent in another letter case
// ("expect", as HAProxy and HTTP/2-speaking proxies send it) to "Expect":
// with the names kept as sent, fasthttp looks for 100-continue under that
// spelling only, and would otherwise neither run the ExpectHandler nor
// answer 100 Continue, leaving a client that waits for it (through
// HAProxy: for ever) without an answer until the body stall timeout.
func canonicalExpect(h *fasthttp.RequestHeader) {
	var name, value []byte
	for k, v := range h.All() {
		if len(k) == len("expect") && hasPrefixFold(k, "expect") && string(k) != "Expect" {
			name, value = append([]byte(nil), k...), append([]byte(nil), v...)
			break
		}
	}
	if name == nil {
		return
	}
	h.DelBytes(name)
	h.SetBytesV("Expect", value)
}
