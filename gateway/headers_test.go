package gateway

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func parseRequest(t testing.TB, raw string) *fasthttp.Request {
	t.Helper()
	var req fasthttp.Request
	req.Header.DisableNormalizing()
	if err := req.Header.Read(bufioReader(raw)); err != nil {
		t.Fatal(err)
	}
	return &req
}

// Every header the gateway reads is found whatever its letter case.
func TestHeaderViewAnyCase(t *testing.T) {
	for _, name := range []string{"x-amz-copy-source", "X-Amz-Copy-Source", "X-AMZ-COPY-SOURCE", "x-AmZ-cOpY-sOuRcE"} {
		req := parseRequest(t, "PUT /b/k HTTP/1.1\r\nHost: h\r\n"+name+": src/key\r\nIF-MATCH: \"e\"\r\nif-none-match: *\r\nX-amz-Metadata-Directive: REPLACE\r\n\r\n")
		v, e := readHeaders(&req.Header, req.URI().QueryArgs())
		if e != nil {
			t.Fatal(e)
		}
		if v.get("x-amz-copy-source") != "src/key" || v.get("if-match") != `"e"` || v.get("if-none-match") != "*" ||
			v.get("x-amz-metadata-directive") != "REPLACE" {
			t.Fatalf("%s: %+v", name, v.fields)
		}
	}
}

// A header repeated in different cases is either merged as SigV4 signs it
// (lists) or refused (single values): never half-seen. (fasthttp itself keeps
// one Content-Type, Content-Length and Host, the same one for the signature
// check and for the view.)
func TestHeaderViewRepeats(t *testing.T) {
	req := parseRequest(t, "PUT /b/k HTTP/1.1\r\nHost: h\r\nx-amz-meta-a: 1\r\nX-Amz-Meta-A: 2\r\n\r\n")
	v, e := readHeaders(&req.Header, req.URI().QueryArgs())
	if e != nil || v.get("x-amz-meta-a") != "1,2" {
		t.Fatalf("merge: %v %+v", e, v.fields)
	}
	for _, name := range []string{"x-amz-copy-source", "x-amz-acl", "x-amz-tagging", "content-md5", "x-amz-metadata-directive", "x-amz-checksum-crc32"} {
		req := parseRequest(t, "PUT /b/k HTTP/1.1\r\nHost: h\r\n"+name+": a\r\n"+strings.ToUpper(name)+": b\r\n\r\n")
		if _, e := readHeaders(&req.Header, req.URI().QueryArgs()); e == nil || e.Code != "InvalidArgument" {
			t.Fatalf("%s repeated: %v", name, e)
		}
	}
}

// x-amz-* query parameters are headers (SDK presigners hoist them), so a copy
// source or an ACL in the query is seen by classification and authorization.
func TestHeaderViewQueryHoisted(t *testing.T) {
	req := parseRequest(t, "PUT /b/k?X-Amz-Acl=public-read&x-amz-copy-source=s%2Fk&X-Amz-Signature=00&partNumber=1 HTTP/1.1\r\nHost: h\r\n\r\n")
	v, e := readHeaders(&req.Header, req.URI().QueryArgs())
	if e != nil {
		t.Fatal(e)
	}
	if v.get("x-amz-acl") != "public-read" || v.get("x-amz-copy-source") != "s/k" || v.has("x-amz-signature") || !v.grantsAccess() {
		t.Fatalf("%+v", v.fields)
	}
	if q := forwardQuery(req.URI().QueryString(), false); q != "partNumber=1" {
		t.Fatalf("forwarded query %q", q)
	}
	req = parseRequest(t, "PUT /b/k?x-amz-acl=private HTTP/1.1\r\nHost: h\r\nX-Amz-Acl: public-read\r\n\r\n")
	if _, e := readHeaders(&req.Header, req.URI().QueryArgs()); e == nil {
		t.Fatal("an ACL both in the query and in a header was accepted")
	}
}

// Only the headers S3 acts on travel upstream, once each, under one name.
func TestForwardedHeaders(t *testing.T) {
	req := parseRequest(t, "PUT /b/k HTTP/1.1\r\nHost: h\r\nX-Amz-Meta-Foo: 1\r\nx-amz-meta-fencegate-attempt: forged\r\n"+
		"Idempotency-Key: 1\r\nCookie: c=1\r\nAuthorization: x\r\nx-amz-date: d\r\ncontent-type: text/plain\r\nContent-Encoding: aws-chunked,gzip\r\n"+
		"x-amz-tagging: a=b\r\nIf-None-Match: *\r\n\r\n")
	v, e := readHeaders(&req.Header, req.URI().QueryArgs())
	if e != nil {
		t.Fatal(e)
	}
	dst := map[string][]string{}
	copyRequestHeaders(dst, v, nil)
	want := map[string]string{"x-amz-meta-foo": "1", "Content-Type": "text/plain", "Content-Encoding": "gzip", "X-Amz-Tagging": "a=b", "If-None-Match": "*"}
	if len(dst) != len(want) {
		t.Fatalf("forwarded %v", dst)
	}
	for k, val := range want {
		if len(dst[k]) != 1 || dst[k][0] != val {
			t.Fatalf("%s: %v (all: %v)", k, dst[k], dst)
		}
	}
}

func TestKeyRules(t *testing.T) {
	s := &Server{}
	for key, code := range map[string]string{
		"": "UserKeyMustBeSpecified", strings.Repeat("k", 1025): "KeyTooLongError", "a\xffb": "InvalidArgument",
		"/a": "InvalidArgument", "a//b": "InvalidArgument", "a/./b": "InvalidArgument", "a/../b": "InvalidArgument",
		"..": "InvalidArgument", "a/..": "InvalidArgument", `a\b`: "InvalidArgument",
	} {
		if e := s.checkKey(key); e == nil || e.Code != code {
			t.Errorf("%q: %v, want %s", key, e, code)
		}
	}
	for _, key := range []string{"a", "a/", "a/b/", "a.b", "..a", "a/.b", "a/b..", strings.Repeat("k", 1024), "ü/日本"} {
		if e := s.checkKey(key); e != nil {
			t.Errorf("%q refused: %v", key, e)
		}
	}
	s.keepsBackslash.Store(true)
	if e := s.checkKey(`a\b`); e != nil {
		t.Errorf("a store that keeps backslashes: %v", e)
	}
}

// The canonical view never disagrees with itself: a name's value is found in
// any case, and any name the gateway could forward is forwarded at most once.
func FuzzHeaderView(f *testing.F) {
	f.Add("x-amz-copy-source", "X-AMZ-COPY-SOURCE", "a/b", "x-amz-acl=public-read")
	f.Add("If-Match", "if-match", `"e"`, "")
	f.Add("x-amz-meta-A", "X-Amz-Meta-a", "v", "X-Amz-Meta-A=q")
	f.Fuzz(func(t *testing.T, n1, n2, val, query string) {
		if !validToken(n1) || !validToken(n2) || strings.ContainsAny(val, "\r\n\x00") || strings.ContainsAny(query, " \r\n#\x00") {
			t.Skip()
		}
		var req fasthttp.Request
		req.Header.DisableNormalizing()
		if req.Header.Read(bufioReader("PUT /b/k?"+query+" HTTP/1.1\r\nHost: h\r\n"+n1+": "+val+"\r\n"+n2+": "+val+"\r\n\r\n")) != nil {
			t.Skip() // not a request fasthttp accepts
		}
		v, e := readHeaders(&req.Header, req.URI().QueryArgs())
		if e != nil {
			return
		}
		seen := map[string]bool{}
		for _, f := range v.fields {
			if f.name != strings.ToLower(f.name) || seen[f.name] {
				t.Fatalf("name %q not canonical or repeated: %+v", f.name, v.fields)
			}
			seen[f.name] = true
		}
		if got := v.get(strings.ToLower(n1)); got == "" && strings.TrimSpace(val) != "" {
			t.Fatalf("%q not found: %+v", n1, v.fields)
		}
		dst := map[string][]string{}
		copyRequestHeaders(dst, v, nil)
		lower := map[string]bool{}
		for k, vs := range dst {
			l := strings.ToLower(k)
			if lower[l] || len(vs) != 1 || !forwardedHeader(l) {
				t.Fatalf("forwarded %v", dst)
			}
			lower[l] = true
		}
	})
}

func FuzzKeyRules(f *testing.F) {
	for _, k := range []string{"a", "a/b", "/a", "a//b", "a/./b", "a/../b", `a\b`, "a/", "é"} {
		f.Add(k)
	}
	s := &Server{}
	f.Fuzz(func(t *testing.T, key string) {
		if s.checkKey(key) != nil {
			return
		}
		// An accepted key is one file path to a filer: no segment the store
		// would fold, valid UTF-8, within S3's length.
		for i, seg := range strings.Split(key, "/") {
			last := i == strings.Count(key, "/")
			if seg == "." || seg == ".." || seg == "" && !(last && i > 0) {
				t.Fatalf("accepted %q (segment %d %q)", key, i, seg)
			}
		}
		if strings.ContainsRune(key, '\\') || len(key) > maxKeyLength || key == "" {
			t.Fatalf("accepted %q", key)
		}
	})
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

// The view's strings are its own copies: fasthttp reuses a connection's
// header buffers for its next request, which must not change what the
// request being served read (its signature, its key, its metadata).
func TestHeaderViewOutlivesTheBuffer(t *testing.T) {
	var req fasthttp.Request
	req.Header.DisableNormalizing()
	if err := req.Header.Read(bufioReader("PUT /b/k?x-amz-acl=private HTTP/1.1\r\nHost: h\r\nX-Amz-Meta-Note: first\r\nx-amz-meta-note: again\r\nContent-Type: text/plain\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	v, e := readHeaders(&req.Header, req.URI().QueryArgs())
	if e != nil {
		t.Fatal(e)
	}
	req.Reset()
	req.Header.DisableNormalizing()
	if err := req.Header.Read(bufioReader("GET /x/y?x-amz-acl=public-read HTTP/1.1\r\nHost: other\r\nX-Amz-Meta-Note: SECOND\r\nx-amz-meta-note: XXXXXX\r\nContent-Type: xxxx/xxxxx\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = req.URI().QueryArgs() // parsed into the same buffers
	if v.get("x-amz-meta-note") != "first,again" || v.get("content-type") != "text/plain" || v.get("x-amz-acl") != "private" {
		t.Fatalf("the view changed with the buffer: %+v", v.fields)
	}
	// (fasthttp lists the headers it keeps apart, Host and Content-Type, first.)
	want := []string{"Host", "h", "Content-Type", "text/plain", "X-Amz-Meta-Note", "first", "x-amz-meta-note", "again"}
	var got []string
	for _, f := range v.raw {
		got = append(got, f.Name, f.Value)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("raw headers %q, want %q", got, want)
	}
}

// readHeaders builds a view of h and query's x-amz-* parameters (headers.go's
// view), refusing a repeated header that cannot be merged.
func readHeaders(h *fasthttp.RequestHeader, query *fasthttp.Args) (*headerView, *apiError) {
	v := &headerView{}
	var a stringArena
	a.grow(headerBytes(h, query))
	return v, v.read(h, query, &a)
}
