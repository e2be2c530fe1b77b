package sigv4

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The Signer's signatures are the AWS SDK's for the same request and signed
// headers (the SDK as the oracle), and the Verifier accepts them.
func TestSignerMatchesTheSDK(t *testing.T) {
	at := time.Date(2026, 12, 1, 21, 30, 5, 0, time.UTC)
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	ours := &Signer{AccessKey: exampleAKID, SecretKey: exampleSecret, Region: "us-east-1", Service: "s3"}
	for _, tc := range []struct {
		method, path, query, payload string
		headers                      map[string][]string
	}{
		{"GET", "/bucket/objects/k-000123", "", EmptySHA256, nil},
		{"GET", "/bucket", "list-type=2&prefix=a%20b&delimiter=%2F&continuation-token=x%2By%3D", EmptySHA256, nil},
		{"GET", "/bucket", "prefix=a+b&max-keys=10", EmptySHA256, nil},
		{"POST", "/bucket/a%20key/%E2%82%AC", "uploads", EmptySHA256, map[string][]string{"Content-Type": {"text/plain"}}},
		{"PUT", "/bucket/k", "partNumber=3&uploadId=2~abc_DEF-1.x", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", map[string][]string{
			"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {"65536"}, "X-Amz-Trailer": {"x-amz-checksum-crc32"},
		}},
		{"PUT", "/bucket/k", "x-id=PutObject", "UNSIGNED-PAYLOAD", map[string][]string{
			"If-Match":                     {`"0123abcd"`},
			"X-Amz-Meta-Fencegate-Attempt": {"7f0c"},
			"X-Amz-Meta-Multi":             {"one", "two  spaced   out "},
			"Cache-Control":                {" no-cache "},
			"User-Agent":                   {"fencegate"},
		}},
		{"DELETE", "/bucket/k", "versionId=null", EmptySHA256, map[string][]string{"If-Match": {`"e"`}}},
	} {
		req, err := http.NewRequest(tc.method, "http://store.example:8333/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque, req.URL.RawQuery = tc.path, tc.query
		for k, vs := range tc.headers {
			req.Header[k] = append([]string(nil), vs...)
		}
		req.Header.Set("X-Amz-Content-Sha256", tc.payload)
		r := &Request{Method: tc.method, Host: req.URL.Host, RawPath: tc.path, RawQuery: tc.query}
		for k, vs := range req.Header {
			for _, v := range vs {
				r.Headers = append(r.Headers, HeaderField{k, v})
			}
		}
		amzDate := AmzDate(at)
		r.Headers = append(r.Headers, HeaderField{"X-Amz-Date", amzDate})

		if err := sdk.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: exampleAKID, SecretAccessKey: exampleSecret},
			req, tc.payload, "s3", "us-east-1", at); err != nil {
			t.Fatal(err)
		}
		got := ours.Sign(r, amzDate, tc.payload)
		name := tc.method + " " + tc.path + "?" + tc.query
		if want := req.Header.Get("Authorization"); got.Authorization != want {
			t.Errorf("%s:\n ours %s\n SDK  %s", name, got.Authorization, want)
		}
		if got.Query != req.URL.RawQuery {
			t.Errorf("%s: query %q, the SDK sends %q", name, got.Query, req.URL.RawQuery)
		}

		// What the store receives: the canonical query on the wire, our
		// Authorization. The Verifier must accept it.
		sent := r.clone()
		sent.RawQuery = got.Query
		sent.Headers = append(sent.Headers, HeaderField{"Authorization", got.Authorization})
		if _, err := testVerifier(at).Verify(sent); err != nil {
			t.Errorf("%s: the Verifier refuses the Signer's request: %v", name, err)
		}
		// And the signature covers what it claims: a changed header fails.
		tampered := sent.clone().set("X-Amz-Content-Sha256", EmptySHA256+"0")
		if tc.payload != EmptySHA256 {
			tampered.set("X-Amz-Content-Sha256", EmptySHA256)
		}
		if _, err := testVerifier(at).Verify(tampered); err == nil {
			t.Errorf("%s: a tampered request verified", name)
		}
		if strings.Contains(got.Authorization, "user-agent") {
			t.Errorf("%s: the hop's user-agent was signed", name)
		}
	}
}

func BenchmarkSigner(b *testing.B) {
	at := time.Now()
	ours := &Signer{AccessKey: exampleAKID, SecretKey: exampleSecret, Region: "us-east-1", Service: "s3"}
	amzDate := AmzDate(at)
	r := &Request{Method: "GET", Host: "127.0.0.1:8333", RawPath: "/bench/objects/k-000123", RawQuery: "x-id=GetObject",
		Headers: []HeaderField{{"X-Amz-Content-Sha256", EmptySHA256}, {"X-Amz-Date", amzDate}, {"Range", "bytes=0-99"}}}
	b.Run("fencegate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s := ours.Sign(r, amzDate, EmptySHA256); !strings.HasPrefix(s.Authorization, algorithm) {
				b.Fatal(s.Authorization)
			}
		}
	})
	b.Run("aws-sdk-go-v2", func(b *testing.B) {
		sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
		creds := aws.Credentials{AccessKeyID: exampleAKID, SecretAccessKey: exampleSecret}
		b.ReportAllocs()
		for b.Loop() {
			req, _ := http.NewRequest("GET", "http://127.0.0.1:8333/", nil)
			req.URL.Opaque, req.URL.RawQuery = r.RawPath, r.RawQuery
			req.Header.Set("X-Amz-Content-Sha256", EmptySHA256)
			req.Header.Set("Range", "bytes=0-99")
			if err := sdk.SignHTTP(context.Background(), creds, req, EmptySHA256, "s3", "us-east-1", at); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A value with a tab is signed in two canonical forms by the clients
// (Whitespace): the Verifier accepts either, and nothing else; the Signer
// signs in the one it is set to. The SDK, which folds spaces only, is the
// oracle for FoldSpaces; for FoldAllWhitespace it signs the value as botocore
// canonicalizes it ("a b c"), which must give the same signature.
func TestHeaderWhitespaceFoldings(t *testing.T) {
	at := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	const value = "a\tb  c"
	sign := func(asSigned string) *Request {
		req, err := http.NewRequest("PUT", "http://gw.example/bucket/k", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		req.Header.Set("X-Amz-Meta-Note", asSigned)
		if err := sdk.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: exampleAKID, SecretAccessKey: exampleSecret},
			req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", at); err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Amz-Meta-Note", value)
		return fromHTTP(req)
	}
	for _, tc := range []struct {
		name, asSigned string
		fold           Whitespace
		ok             bool
	}{
		{"spaces folded", value, FoldSpaces, true},
		{"all whitespace folded", "a b c", FoldAllWhitespace, true},
		{"another value", "a b d", FoldAllWhitespace, false},
		{"the tab dropped", "ab c", FoldAllWhitespace, false},
	} {
		r := sign(tc.asSigned)
		_, err := testVerifier(at).Verify(r)
		if tc.ok && err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
		if !tc.ok {
			wantCode(t, err, CodeSignatureDoesNotMatch)
			continue
		}
		// The Signer set to this folding signs the same request alike.
		ours := &Signer{AccessKey: exampleAKID, SecretKey: exampleSecret, Region: "us-east-1", Service: "s3"}
		ours.SetWhitespace(tc.fold)
		mine := r.clone().del("Authorization").del("Host")
		mine.Host = "gw.example"
		if got, want := ours.Sign(mine, AmzDate(at), "UNSIGNED-PAYLOAD").Authorization, headerOf(r, "Authorization"); got != want {
			t.Errorf("%s: the Signer gives\n %s\nthe client\n %s", tc.name, got, want)
		}
	}
}

func headerOf(r *Request, name string) string {
	for _, h := range r.Headers {
		if http.CanonicalHeaderKey(h.Name) == http.CanonicalHeaderKey(name) {
			return h.Value
		}
	}
	return ""
}
