package sigv4

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

var oracleCreds = aws.Credentials{AccessKeyID: exampleAKID, SecretAccessKey: exampleSecret}

var oracleNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// awsEscapePath encodes a key the way AWS SDKs put it on the wire: every
// byte outside the unreserved set and '/' percent-encoded.
func awsEscapePath(p string) string {
	var b []byte
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			b = append(b, '/')
			continue
		}
		b = appendEscaped(b, p[i])
	}
	return string(b)
}

var awkwardKeys = []string{
	"plain.txt",
	"with space.txt",
	"a+b",
	"100%",
	"unicode/é日本語🎉",
	"eq=sign",
	"tilde~and-under_score.dot",
	"bang!star*quote'paren(x)",
	"dir/sub dir/file name+1%20.txt",
	"$&,:;@[]#?",
	"double//slash",
}

func newSignedRequest(t testing.TB, method, key, rawQuery string, body []byte, hdr map[string]string) *http.Request {
	t.Helper()
	u := &url.URL{Scheme: "http", Host: "gw.example:9000", Path: "/bucket/" + key, RawPath: "/bucket/" + awsEscapePath(key), RawQuery: rawQuery}
	req, err := http.NewRequest(method, u.String(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.RawPath = "/bucket/" + awsEscapePath(key)
	req.URL.Path = "/bucket/" + key
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

func payloadHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func sdkSign(t testing.TB, req *http.Request, payload string, at time.Time) {
	t.Helper()
	req.Header.Set("X-Amz-Content-Sha256", payload)
	err := v4.NewSigner().SignHTTP(context.Background(), oracleCreds, req, payload, "s3", "us-east-1", at,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err != nil {
		t.Fatal(err)
	}
}

func sdkPresign(t *testing.T, req *http.Request, expires time.Duration, at time.Time) {
	t.Helper()
	q := req.URL.Query()
	q.Set("X-Amz-Expires", strconv.FormatInt(int64(expires/time.Second), 10))
	req.URL.RawQuery = q.Encode()
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), oracleCreds, req, modeUnsigned, "s3", "us-east-1", at,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(signed)
	if err != nil {
		t.Fatal(err)
	}
	req.URL = u
}

var oracleQueries = []string{
	"",
	"acl",
	"prefix=a%20b&delimiter=%2F&max-keys=10",
	"list-type=2&prefix=&start-after=x",
	"tag=b&tag=a&tag=",
	"k=v%2Bw&k=v+w&z=%7E&a=%21%2A%27%28%29",
	"uploadId=abc&partNumber=3",
	"versionId=null&x-id=GetObject",
	"e%CC%81=unicode&%C3%A9=%E6%97%A5",
}

func TestOracleHeaderAuth(t *testing.T) {
	v := testVerifier(oracleNow)
	body := []byte("hello, world")
	for _, key := range awkwardKeys {
		for _, q := range oracleQueries {
			for _, payload := range []string{payloadHex(body), modeUnsigned} {
				req := newSignedRequest(t, "PUT", key, q, body, map[string]string{
					"X-Amz-Meta-Note": "  spaced   out  value ",
					"Content-Type":    "text/plain",
				})
				req.Header.Add("X-Amz-Meta-Multi", "one")
				req.Header.Add("X-Amz-Meta-Multi", "two")
				sdkSign(t, req, payload, oracleNow.Add(-time.Minute))
				r := fromHTTP(req)
				a, err := v.Verify(r)
				if err != nil {
					t.Fatalf("key %q query %q: %v", key, q, err)
				}
				br, _ := a.Body(bytes.NewReader(body))
				got, err := readBody(br, 5)
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("key %q: body %q %v", key, got, err)
				}
			}
		}
	}
}

// TestOracleEquivalentSpellings: S3 normalises percent-encoding, so a path or
// query spelled differently but decoding to the same bytes still verifies.
func TestOracleEquivalentSpellings(t *testing.T) {
	v := testVerifier(oracleNow)
	req := newSignedRequest(t, "GET", "a~b+c!d", "prefix=a~b", nil, nil)
	sdkSign(t, req, EmptySHA256, oracleNow)
	base := fromHTTP(req)
	for _, alt := range []struct{ path, query string }{
		{"/bucket/a%7Eb%2bc%21d", base.RawQuery},
		{"/bucket/a~b%2Bc!d", base.RawQuery},
		{base.RawPath, "prefix=a%7eb"},
	} {
		r := base.clone()
		r.RawPath, r.RawQuery = alt.path, alt.query
		if _, err := v.Verify(r); err != nil {
			t.Fatalf("%+v: %v", alt, err)
		}
	}
	// But a different key is a different request.
	r := base.clone()
	r.RawPath = "/bucket/a~b%20c!d"
	_, err := v.Verify(r)
	wantCode(t, err, CodeSignatureDoesNotMatch)
}

func TestOracleHeaderAuthTampered(t *testing.T) {
	v := testVerifier(oracleNow)
	body := []byte("payload bytes")
	req := newSignedRequest(t, "PUT", "dir/key name", "tagging&x=1&x=2", body, map[string]string{"X-Amz-Meta-A": "b"})
	sdkSign(t, req, payloadHex(body), oracleNow)
	base := fromHTTP(req)
	if _, err := v.Verify(base); err != nil {
		t.Fatal(err)
	}
	mut := func(f func(r *Request)) *Request { r := base.clone(); f(r); return r }
	for name, r := range map[string]*Request{
		"method":       mut(func(r *Request) { r.Method = "POST" }),
		"path":         mut(func(r *Request) { r.RawPath += "x" }),
		"query value":  mut(func(r *Request) { r.RawQuery = strings.Replace(r.RawQuery, "x=2", "x=3", 1) }),
		"query drop":   mut(func(r *Request) { r.RawQuery = strings.Replace(r.RawQuery, "&x=2", "", 1) }),
		"query add":    mut(func(r *Request) { r.RawQuery += "&y=" }),
		"meta header":  mut(func(r *Request) { r.set("X-Amz-Meta-A", "c") }),
		"date":         mut(func(r *Request) { r.set("X-Amz-Date", oracleNow.Add(time.Second).Format(iso8601Basic)) }),
		"content hash": mut(func(r *Request) { r.set("X-Amz-Content-Sha256", modeUnsigned) }),
	} {
		_, err := v.Verify(r)
		wantCode(t, err, CodeSignatureDoesNotMatch)
		_ = name
	}
	// A body byte flipped: the payload hash check fails before the last byte.
	a, _ := v.Verify(base)
	bad := bytes.Clone(body)
	bad[3] ^= 0x20
	br, _ := a.Body(bytes.NewReader(bad))
	got, err := readBody(br, 1)
	wantCode(t, err, CodeXAmzContentSHA256Mismatch)
	if len(got) >= len(body) {
		t.Fatalf("yielded %d bytes", len(got))
	}
}

func TestOracleSkew(t *testing.T) {
	req := newSignedRequest(t, "GET", "k", "", nil, nil)
	sdkSign(t, req, EmptySHA256, oracleNow)
	r := fromHTTP(req)
	for _, d := range []time.Duration{-14 * time.Minute, 14 * time.Minute} {
		if _, err := testVerifier(oracleNow.Add(d)).Verify(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []time.Duration{-16 * time.Minute, 16 * time.Minute} {
		_, err := testVerifier(oracleNow.Add(d)).Verify(r)
		e := wantCode(t, err, CodeRequestTimeTooSkewed)
		if e.Status != 403 || e.Field("RequestTime") == "" || e.Field("ServerTime") == "" || e.Field("MaxAllowedSkewMilliseconds") != "900000" {
			t.Fatalf("%+v", e)
		}
	}
}

func TestOraclePresigned(t *testing.T) {
	v := testVerifier(oracleNow)
	for _, key := range awkwardKeys {
		for _, q := range oracleQueries {
			req := newSignedRequest(t, "GET", key, q, nil, nil)
			sdkPresign(t, req, time.Hour, oracleNow.Add(-time.Minute))
			a, err := v.Verify(fromHTTP(req))
			if err != nil {
				t.Fatalf("key %q query %q: %v", key, q, err)
			}
			if !a.Presigned || a.Payload != PayloadUnsigned {
				t.Fatalf("%+v", a)
			}
		}
	}
}

func TestOraclePresignedExpiry(t *testing.T) {
	req := newSignedRequest(t, "GET", "k", "", nil, nil)
	sdkPresign(t, req, 2*time.Hour, oracleNow)
	r := fromHTTP(req)
	// Valid for its whole lifetime, well beyond the skew window.
	for _, d := range []time.Duration{0, time.Hour, 2 * time.Hour, -10 * time.Minute} {
		if _, err := testVerifier(oracleNow.Add(d)).Verify(r); err != nil {
			t.Fatalf("%v: %v", d, err)
		}
	}
	_, err := testVerifier(oracleNow.Add(2*time.Hour + time.Second)).Verify(r)
	e := wantCode(t, err, CodeAccessDenied)
	if e.Message != "Request has expired" || e.Field("X-Amz-Expires") != "7200" || e.Field("Expires") != "2026-03-01T14:00:00Z" || e.Field("ServerTime") == "" {
		t.Fatalf("%+v", e)
	}
	// Dated in the future beyond the skew.
	_, err = testVerifier(oracleNow.Add(-16 * time.Minute)).Verify(r)
	wantCode(t, err, CodeAccessDenied)

	// Zero seconds of validity: expired on arrival (403), not malformed.
	r0 := r.clone()
	r0.RawQuery = strings.Replace(r.RawQuery, "X-Amz-Expires=7200", "X-Amz-Expires=0", 1)
	_, err = testVerifier(oracleNow).Verify(r0)
	if e := wantCode(t, err, CodeAccessDenied); e.Message != "Request has expired" {
		t.Fatalf("X-Amz-Expires=0: %+v", e)
	}
	for _, exp := range []string{"-1", "604801", "x"} {
		r2 := r.clone()
		r2.RawQuery = strings.Replace(r.RawQuery, "X-Amz-Expires=7200", "X-Amz-Expires="+exp, 1)
		_, err := testVerifier(oracleNow).Verify(r2)
		wantCode(t, err, CodeAuthorizationQueryParametersError)
	}
	// The maximum is accepted (the signature then fails, since we changed it).
	r2 := r.clone()
	r2.RawQuery = strings.Replace(r.RawQuery, "X-Amz-Expires=7200", "X-Amz-Expires=604800", 1)
	_, err = testVerifier(oracleNow).Verify(r2)
	wantCode(t, err, CodeSignatureDoesNotMatch)
}
