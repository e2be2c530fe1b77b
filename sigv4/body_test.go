package sigv4

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

func b64hex(h string) string {
	b, _ := hex.DecodeString(h)
	return base64.StdEncoding.EncodeToString(b)
}

// signedPut signs a PUT of body with the SDK; extra headers are signed too.
func signedPut(t *testing.T, body []byte, payload string, hdr map[string]string) *Request {
	t.Helper()
	req := newSignedRequest(t, "PUT", "key", "", body, hdr)
	sdkSign(t, req, payload, oracleNow)
	return fromHTTP(req)
}

// signedPutTE signs a PUT sent with Transfer-Encoding: chunked (no
// Content-Length, so none is signed).
func signedPutTE(t *testing.T, body []byte, payload string, hdr map[string]string) *Request {
	t.Helper()
	req := newSignedRequest(t, "PUT", "key", "", body, hdr)
	req.ContentLength = -1
	sdkSign(t, req, payload, oracleNow)
	return fromHTTP(req).set("Transfer-Encoding", "chunked")
}

func verifyBody(t *testing.T, r *Request, raw io.Reader, step int) ([]byte, error) {
	t.Helper()
	a, err := testVerifier(oracleNow).Verify(r)
	if err != nil {
		t.Fatal(err)
	}
	br, err := a.Body(raw)
	if err != nil {
		t.Fatal(err)
	}
	return readBody(br, step)
}

func TestChecksumHeaders(t *testing.T) {
	body := []byte("123456789")
	known := map[string]string{ // check values of "123456789"
		"crc32":     b64hex("cbf43926"),
		"crc32c":    b64hex("e3069283"),
		"crc64nvme": b64hex("ae8b14860a799888"),
		"sha1":      func() string { s := sha1.Sum(body); return base64.StdEncoding.EncodeToString(s[:]) }(),
		"sha256":    func() string { s := sha256.Sum256(body); return base64.StdEncoding.EncodeToString(s[:]) }(),
	}
	for algo, good := range known {
		for _, payload := range []string{modeUnsigned, payloadHex(body)} {
			r := signedPut(t, body, payload, map[string]string{"X-Amz-Checksum-" + algo: good})
			if got, err := verifyBody(t, r, bytes.NewReader(body), 1); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%s: %v", algo, err)
			}
			// Same body, wrong (well-formed) value: BadDigest before the last byte.
			wrong := known["crc32"]
			if algo == "crc32" {
				wrong = known["crc32c"]
			}
			if algo == "crc64nvme" {
				wrong = b64hex("0000000000000000")
			}
			if algo == "sha1" || algo == "sha256" {
				wrong = strings.Replace(good, good[:2], "AA", 1)
			}
			r = signedPut(t, body, payload, map[string]string{"X-Amz-Checksum-" + algo: wrong})
			got, err := verifyBody(t, r, bytes.NewReader(body), 1)
			wantCode(t, err, CodeBadDigest)
			if len(got) >= len(body) {
				t.Fatalf("%s: yielded %d bytes", algo, len(got))
			}
			// Malformed value: refused by Verify, before the body, as a
			// digest that cannot match.
			r = signedPut(t, body, payload, map[string]string{"X-Amz-Checksum-" + algo: "AAAA" + good})
			_, err = testVerifier(oracleNow).Verify(r)
			wantCode(t, err, CodeBadDigest)
		}
	}
	// Two checksum headers.
	r := signedPut(t, body, modeUnsigned, map[string]string{"X-Amz-Checksum-Crc32": known["crc32"], "X-Amz-Checksum-Sha1": known["sha1"]})
	_, err := testVerifier(oracleNow).Verify(r)
	wantCode(t, err, CodeInvalidRequest)
}

func TestContentMD5(t *testing.T) {
	body := []byte("some body to hash")
	sum := md5.Sum(body)
	good := base64.StdEncoding.EncodeToString(sum[:])
	r := signedPut(t, body, modeUnsigned, map[string]string{"Content-Md5": good})
	if got, err := verifyBody(t, r, bytes.NewReader(body), 3); err != nil || !bytes.Equal(got, body) {
		t.Fatal(err)
	}
	sum[0] ^= 1
	r = signedPut(t, body, modeUnsigned, map[string]string{"Content-Md5": base64.StdEncoding.EncodeToString(sum[:])})
	got, err := verifyBody(t, r, bytes.NewReader(body), 1)
	wantCode(t, err, CodeBadDigest)
	if len(got) >= len(body) {
		t.Fatal("yielded the whole body")
	}
	for _, bad := range []string{"not base64", base64.StdEncoding.EncodeToString([]byte("short"))} {
		r = signedPut(t, body, modeUnsigned, map[string]string{"Content-Md5": bad})
		_, err = testVerifier(oracleNow).Verify(r)
		wantCode(t, err, CodeInvalidDigest)
	}
}

// TestHoldBackPlain: every final check of a plain body fails before the
// last payload byte is yielded, whatever the read size.
func TestHoldBackPlain(t *testing.T) {
	body := testPayload(10_000)
	bad := bytes.Clone(body)
	bad[len(bad)-1] ^= 1
	md := md5.Sum(body)
	for name, tc := range map[string]struct {
		r    *Request
		raw  func() io.Reader
		code string
	}{
		"payload hash": {signedPut(t, body, payloadHex(body), nil), func() io.Reader { return bytes.NewReader(bad) }, CodeXAmzContentSHA256Mismatch},
		"content-md5":  {signedPut(t, body, modeUnsigned, map[string]string{"Content-Md5": base64.StdEncoding.EncodeToString(md[:])}), func() io.Reader { return bytes.NewReader(bad) }, CodeBadDigest},
		"checksum":     {signedPut(t, body, modeUnsigned, map[string]string{"X-Amz-Checksum-Crc32": crc32b64(body)}), func() io.Reader { return bytes.NewReader(bad) }, CodeBadDigest},
		"short body":   {signedPut(t, body, modeUnsigned, nil), func() io.Reader { return bytes.NewReader(body[:len(body)-1]) }, CodeIncompleteBody},
		"short, EOF with data": {signedPut(t, body, modeUnsigned, nil), func() io.Reader {
			return iotest.DataErrReader(bytes.NewReader(body[:len(body)-1]))
		}, CodeIncompleteBody},
		"TE payload hash": {signedPutTE(t, body, payloadHex(body), nil), func() io.Reader { return bytes.NewReader(bad) }, CodeXAmzContentSHA256Mismatch},
		"TE checksum":     {signedPutTE(t, body, modeUnsigned, map[string]string{"X-Amz-Checksum-Crc32": crc32b64(body)}), func() io.Reader { return bytes.NewReader(bad) }, CodeBadDigest},
	} {
		for _, step := range []int{1, 2, 999, 10_000, 20_000} {
			got, err := verifyBody(t, tc.r, iotest.HalfReader(tc.raw()), step)
			wantCode(t, err, tc.code)
			if len(got) >= len(body) {
				t.Fatalf("%s step %d: yielded %d of %d bytes", name, step, len(got), len(body))
			}
		}
	}
}

func TestPlainBodies(t *testing.T) {
	body := testPayload(5000)
	// Extra bytes past Content-Length are neither read nor yielded.
	r := signedPut(t, body, payloadHex(body), nil)
	raw := bytes.NewReader(append(bytes.Clone(body), "NEXT REQUEST"...))
	got, err := verifyBody(t, r, raw, 7000)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatal(err)
	}
	if raw.Len() != len("NEXT REQUEST") {
		t.Fatalf("read past Content-Length: %d left", raw.Len())
	}
	// Transfer-Encoding: chunked, no Content-Length, every read size.
	r = signedPutTE(t, body, payloadHex(body), nil)
	for _, step := range []int{1, 2, 3, 4096, 8192} {
		got, err := verifyBody(t, r, iotest.OneByteReader(bytes.NewReader(body)), step)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("step %d: %v", step, err)
		}
		got, err = verifyBody(t, r, iotest.DataErrReader(bytes.NewReader(body)), step)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	// Empty bodies.
	r = signedPut(t, nil, EmptySHA256, nil)
	if got, err := verifyBody(t, r, nil, 10); err != nil || len(got) != 0 {
		t.Fatal(err)
	}
	// A raw reader error passes through.
	boom := errors.New("boom")
	r = signedPut(t, body, modeUnsigned, nil)
	_, err = verifyBody(t, r, io.MultiReader(bytes.NewReader(body[:10]), iotest.ErrReader(boom)), 100)
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
}

// chunkedReq returns a verified Auth for an unsigned-trailer aws-chunked body.
func chunkedAuth(t testing.TB, trailer string, decoded int64, rawLen int) *Auth {
	t.Helper()
	hdr := map[string]string{"Content-Encoding": "aws-chunked"}
	if trailer != "" {
		hdr["X-Amz-Trailer"] = trailer
	}
	if decoded >= 0 {
		hdr["X-Amz-Decoded-Content-Length"] = strconv.FormatInt(decoded, 10)
	}
	req := newSignedRequest(t, "PUT", "key", "", nil, hdr)
	sdkSign(t, req, modeUnsignedTrail, oracleNow)
	r := fromHTTP(req)
	if rawLen >= 0 {
		r.set("Content-Length", strconv.Itoa(rawLen))
	} else {
		r.set("Transfer-Encoding", "chunked")
	}
	a, err := testVerifier(oracleNow).Verify(r)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestChunkedFraming(t *testing.T) {
	data := []byte("hello world")
	for _, tc := range []struct {
		name    string
		wire    string
		decoded int64
		code    string
	}{
		{"ok", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 11, ""},
		{"ok no final CRLF", "5\r\nhello\r\n6\r\n world\r\n0\r\n", 11, ""},
		{"ok bare LF", "5\nhello\n6\n world\n0\n\n", -1, ""},
		{"ok extension ignored", "5;foo=bar\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 11, ""},
		{"decoded shorter", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 12, CodeIncompleteBody},
		{"decoded longer", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 10, CodeIncompleteBody},
		{"missing CRLF after data", "5\r\nhelloX6\r\n world\r\n0\r\n\r\n", -1, CodeInvalidRequest},
		{"bad size", "5g\r\nhello\r\n0\r\n\r\n", -1, CodeInvalidRequest},
		{"empty size", "\r\nhello\r\n0\r\n\r\n", -1, CodeInvalidRequest},
		{"huge size", "7fffffffffffffff\r\nhello\r\n0\r\n\r\n", -1, CodeInvalidRequest},
		{"size over limit", "1000001\r\nhello\r\n0\r\n\r\n", -1, CodeInvalidRequest},
		{"no final chunk", "5\r\nhello\r\n6\r\n world\r\n", -1, CodeIncompleteBody},
		{"long line", "5" + strings.Repeat(" ", 5000) + "\r\nhello\r\n0\r\n\r\n", -1, CodeInvalidRequest},
		{"trailer without announcement", "b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:" + crc32b64(data) + "\r\n\r\n", -1, CodeInvalidRequest},
		{"garbage after last chunk", "b\r\nhello world\r\n0\r\ngarbage\r\n\r\n", -1, CodeMalformedTrailerError},
	} {
		for _, te := range []bool{false, true} {
			rawLen := len(tc.wire)
			if te {
				rawLen = -1
			}
			a := chunkedAuth(t, "", tc.decoded, rawLen)
			br, _ := a.Body(iotest.HalfReader(strings.NewReader(tc.wire)))
			got, err := readBody(br, 3)
			if tc.code == "" {
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%s: %v %q", tc.name, err, got)
				}
				continue
			}
			wantCode(t, err, tc.code)
			if len(got) >= len(data) {
				t.Fatalf("%s: yielded %d bytes", tc.name, len(got))
			}
		}
	}
}

func TestChunkedTrailerLimits(t *testing.T) {
	a := chunkedAuth(t, "x-amz-checksum-crc32", -1, -1)
	wire := "1\r\nx\r\n0\r\n" + strings.Repeat("\r\n", 10_000)
	br, _ := a.Body(strings.NewReader(wire))
	_, err := readBody(br, 10)
	wantCode(t, err, CodeMalformedTrailerError)
	wire = "1\r\nx\r\n0\r\nx-amz-checksum-crc32:" + crc32b64([]byte("x")) + "\r\nx-amz-checksum-crc32:" + crc32b64([]byte("x")) + "\r\n\r\n"
	br, _ = a.Body(strings.NewReader(wire))
	_, err = readBody(br, 10)
	wantCode(t, err, CodeMalformedTrailerError)
}

func TestNoAuthAndUnsupported(t *testing.T) {
	v := testVerifier(oracleNow)
	_, err := v.Verify(&Request{Method: "GET", RawPath: "/b/k", Host: "h", RawQuery: "x-id=GetObject"})
	e := wantCode(t, err, CodeAccessDenied)
	if !errors.Is(err, ErrNoCredentials) || e.Status != 403 {
		t.Fatal("anonymous request must wrap ErrNoCredentials")
	}
	for _, tc := range []struct {
		auth, query, code string
	}{
		// SigV2 (v2.go): a signature over another request, an expired URL.
		{"AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=", "", CodeSignatureDoesNotMatch},
		{"", "AWSAccessKeyId=AKID&Expires=1&Signature=x", CodeAccessDenied},
		{"AWS4-ECDSA-P256-SHA256 Credential=AKID/20260301/s3/aws4_request, SignedHeaders=host, Signature=30", "", CodeNotImplemented},
		{"", "X-Amz-Algorithm=AWS4-ECDSA-P256-SHA256&X-Amz-Credential=a", CodeNotImplemented},
		{"Bearer xyz", "", CodeInvalidArgument},
		{"AWS4-HMAC-SHA256 Credential=AKID/20260301/us-east-1/s3/aws4_request, SignedHeaders=host", "", CodeAuthorizationHeaderMalformed},
		{"AWS4-HMAC-SHA256 Credential=AKID/20260301/us-east-1/s3, SignedHeaders=host, Signature=" + strings.Repeat("a", 64), "", CodeAuthorizationHeaderMalformed},
		{"AWS4-HMAC-SHA256 Credential=AKID/20260301/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=abc", "", CodeAuthorizationHeaderMalformed},
		{"AWS4-HMAC-SHA256 Credential=AKID/20260301/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + strings.Repeat("a", 64), "X-Amz-Signature=" + strings.Repeat("a", 64), CodeInvalidArgument},
		{"", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20260301%2Fus-east-1%2Fs3%2Faws4_request", CodeAuthorizationQueryParametersError},
		{"", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Algorithm=AWS4-HMAC-SHA256", CodeAuthorizationQueryParametersError},
	} {
		r := &Request{Method: "GET", RawPath: "/b/k", Host: "h", RawQuery: tc.query, Headers: []HeaderField{{"Host", "h"}, {"X-Amz-Date", "20260301T120000Z"}, {"X-Amz-Content-Sha256", EmptySHA256}}}
		if tc.auth != "" {
			r.Headers = append(r.Headers, HeaderField{"Authorization", tc.auth})
		}
		_, err := v.Verify(r)
		e := wantCode(t, err, tc.code)
		if tc.code == CodeNotImplemented && e.Status != 501 {
			t.Fatal(e.Status)
		}
	}
	// SigV4a streaming payload.
	req := newSignedRequest(t, "PUT", "k", "", nil, nil)
	sdkSign(t, req, "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD", oracleNow)
	_, err = v.Verify(fromHTTP(req))
	wantCode(t, err, CodeNotImplemented)
	// Invalid x-amz-content-sha256.
	req = newSignedRequest(t, "PUT", "k", "", nil, nil)
	sdkSign(t, req, "nonsense", oracleNow)
	_, err = v.Verify(fromHTTP(req))
	wantCode(t, err, CodeInvalidArgument)
}

func TestChunkedStopsAtContentLength(t *testing.T) {
	wire := "5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:" + crc32b64([]byte("hello world")) + "\r\n\r\n"
	a := chunkedAuth(t, "x-amz-checksum-crc32", 11, len(wire))
	raw := strings.NewReader(wire + "GET /next HTTP/1.1\r\n")
	br, _ := a.Body(raw)
	got, err := readBody(br, 4)
	if err != nil || string(got) != "hello world" {
		t.Fatal(got, err)
	}
	if raw.Len() != len("GET /next HTTP/1.1\r\n") {
		t.Fatalf("read past Content-Length: %d left", raw.Len())
	}
	if tr := br.Trailers(); len(tr) != 1 || tr[0].Name != "x-amz-checksum-crc32" {
		t.Fatal(tr)
	}
}

// x-amz-* query parameters are headers to the gateway (it hoists them and
// sends them to the store as headers), so the body's own headers sent that
// way are read as if sent as headers: a checksum is verified against the
// body, and a trailer or decoded length taken or refused as the header is.
func TestBodyHeadersInTheQuery(t *testing.T) {
	body := []byte("123456789")
	good, wrong := b64hex("cbf43926"), b64hex("e3069283")
	r := signedPutQuery(t, body, "x-amz-checksum-crc32="+url.QueryEscape(good))
	if got, err := verifyBody(t, r, bytes.NewReader(body), 1); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the right CRC32 in the query: %v", err)
	}
	r = signedPutQuery(t, body, "X-Amz-Checksum-Crc32="+url.QueryEscape(wrong))
	_, err := verifyBody(t, r, bytes.NewReader(body), 1)
	wantCode(t, err, CodeBadDigest)
	// Two checksums, one a signed header and one in the query.
	req := newSignedRequest(t, "PUT", "key", "x-amz-checksum-crc32="+url.QueryEscape(good), body,
		map[string]string{"X-Amz-Checksum-Crc32c": b64hex("e3069283")})
	sdkSign(t, req, modeUnsigned, oracleNow)
	_, err = testVerifier(oracleNow).Verify(fromHTTP(req))
	wantCode(t, err, CodeInvalidRequest)
	for _, name := range []string{"x-amz-trailer", "x-amz-decoded-content-length"} {
		value := map[string]string{"x-amz-trailer": "x-amz-checksum-crc32", "x-amz-decoded-content-length": "9"}[name]
		_, asHeader := testVerifier(oracleNow).Verify(signedPut(t, body, modeUnsigned, map[string]string{name: value}))
		_, inQuery := testVerifier(oracleNow).Verify(signedPutQuery(t, body, name+"="+value))
		if name == "x-amz-trailer" && asHeader == nil {
			t.Fatalf("%s as a header on a plain body was taken", name)
		}
		if asHeader == nil {
			if inQuery != nil {
				t.Errorf("%s: taken as a header, refused in the query: %v", name, inQuery)
			}
			continue
		}
		wantCode(t, inQuery, asHeader.(*Error).Code)
	}
}

// signedPutQuery signs a PUT of body with query (header authorization,
// which signs the query, payload unsigned).
func signedPutQuery(t *testing.T, body []byte, query string) *Request {
	t.Helper()
	req := newSignedRequest(t, "PUT", "key", query, body, nil)
	sdkSign(t, req, modeUnsigned, oracleNow)
	return fromHTTP(req)
}
