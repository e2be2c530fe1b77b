package conformance

import (
	"crypto/md5"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// CORS (issue 30): browsers' preflights are answered from the bucket's CORS
// configuration, set through fencegate with put-bucket-cors and read back
// from the store; actual answers, errors included, carry the matching rule's
// Access-Control-* headers.

const appOrigin = "http://app.example"

const corsDocument = `<CORSConfiguration>
<CORSRule><AllowedOrigin>` + appOrigin + `</AllowedOrigin><AllowedMethod>PUT</AllowedMethod><AllowedMethod>GET</AllowedMethod>
<AllowedHeader>content-type</AllowedHeader><AllowedHeader>x-amz-*</AllowedHeader><ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>300</MaxAgeSeconds></CORSRule>
<CORSRule><AllowedOrigin>https://*.wild.example</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>
</CORSConfiguration>`

func putBucketCORS(t *testing.T, ep stack.Endpoint, bucket, doc string) {
	t.Helper()
	sum := md5.Sum([]byte(doc))
	w := wireExchange(t, ep, "PUT", "/"+bucket+"?cors", []byte(doc), map[string]string{
		"Content-MD5": base64.StdEncoding.EncodeToString(sum[:]), "Content-Type": "application/xml"})
	wantWireStatus(t, "put-bucket-cors", w, 200)
}

// corsRequest sends an unsigned request (a preflight, or a presigned URL
// already in target) with the given headers.
func corsRequest(t *testing.T, method, target string, body []byte, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

func preflight(t *testing.T, ep stack.Endpoint, path, origin, method, headers string) (*http.Response, []byte) {
	t.Helper()
	h := map[string]string{}
	if origin != "" {
		h["Origin"] = origin
	}
	if method != "" {
		h["Access-Control-Request-Method"] = method
	}
	if headers != "" {
		h["Access-Control-Request-Headers"] = headers
	}
	return corsRequest(t, "OPTIONS", ep.URL+path, nil, h)
}

func wantHeader(t *testing.T, what string, resp *http.Response, name, want string) {
	t.Helper()
	if got := resp.Header.Get(name); got != want {
		t.Errorf("%s: %s %q, want %q", what, name, got, want)
	}
}

func wantVaryOrigin(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	if !strings.Contains(resp.Header.Get("Vary"), "Origin") {
		t.Errorf("%s: Vary %q, want it to name Origin", what, resp.Header.Get("Vary"))
	}
}

// The preflight's answers: a matching rule, straight from the store and
// through fencegate alike; and S3's refusals (no configuration, an origin,
// method or header no rule allows, no Origin), through fencegate. SeaweedFS
// itself answers those 200 (or 403 AccessDenied for an origin), not as S3
// does, so they are checked against fencegate alone.
func TestCORSPreflight(t *testing.T) {
	for _, tg := range compatTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ep := tg.ep
			bucket := testenv.Bucket(t)
			createBucket(t, ep, bucket)
			path := "/" + bucket + "/upload.txt"
			s3Refusals := tg.name == "fencegate"

			if s3Refusals {
				resp, body := preflight(t, ep, path, appOrigin, "PUT", "")
				wantS3Error(t, "preflight before any CORS configuration", resp, body, 403, "CORSResponse")
			}

			putBucketCORS(t, ep, bucket, corsDocument)
			resp, body := preflight(t, ep, path, appOrigin, "PUT", "Content-Type, x-amz-meta-owner")
			if resp.StatusCode != 200 {
				t.Fatalf("preflight the rule allows: %d\n%s", resp.StatusCode, body)
			}
			wantHeader(t, "preflight", resp, "Access-Control-Allow-Origin", appOrigin)
			wantHeader(t, "preflight", resp, "Access-Control-Max-Age", "300")
			if got := strings.ReplaceAll(resp.Header.Get("Access-Control-Allow-Methods"), " ", ""); got != "PUT,GET" {
				t.Errorf("preflight: Access-Control-Allow-Methods %q, want PUT, GET", got)
			}
			if got := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")); !strings.Contains(got, "content-type") || !strings.Contains(got, "x-amz-meta-owner") {
				t.Errorf("preflight: Access-Control-Allow-Headers %q, want content-type and x-amz-meta-owner", got)
			}
			resp, body = preflight(t, ep, path, "https://cdn.wild.example", "GET", "")
			if resp.StatusCode != 200 {
				t.Fatalf("preflight from a wildcard origin: %d\n%s", resp.StatusCode, body)
			}
			wantHeader(t, "preflight from a wildcard origin", resp, "Access-Control-Allow-Origin", "https://cdn.wild.example")
			if !s3Refusals {
				return
			}
			wantVaryOrigin(t, "preflight", resp)
			resp, body = preflight(t, ep, path, "http://evil.example", "PUT", "")
			wantS3Error(t, "preflight from an origin no rule allows", resp, body, 403, "CORSResponse")
			resp, body = preflight(t, ep, path, appOrigin, "DELETE", "")
			wantS3Error(t, "preflight for a method no rule allows", resp, body, 403, "CORSResponse")
			resp, body = preflight(t, ep, path, appOrigin, "PUT", "x-custom")
			wantS3Error(t, "preflight for a header no rule allows", resp, body, 403, "CORSResponse")
			resp, body = preflight(t, ep, path, "", "PUT", "")
			wantS3Error(t, "preflight without Origin", resp, body, 400, "BadRequest")
			resp, body = preflight(t, ep, path, appOrigin, "", "")
			wantS3Error(t, "preflight without Access-Control-Request-Method", resp, body, 400, "BadRequest")
			if resp.Header.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("a refused preflight allows the origin")
			}
		})
	}
}

// The actual requests: a presigned PUT and GET from the allowed origin carry
// the rule's headers, and so do their errors (a missing key, a tampered
// signature); an origin no rule allows gets none. Deleting the configuration
// through fencegate closes preflights at once.
func TestCORSActualResponses(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ep := g.Endpoint
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	putBucketCORS(t, ep, bucket, corsDocument)
	origin := map[string]string{"Origin": appOrigin}

	resp, body := corsRequest(t, "PUT", presigned(t, ep, "PUT", "/"+bucket+"/k"), []byte("from the browser"), origin)
	if resp.StatusCode != 200 {
		t.Fatalf("presigned PUT with Origin: %d\n%s", resp.StatusCode, body)
	}
	wantHeader(t, "presigned PUT", resp, "Access-Control-Allow-Origin", appOrigin)
	wantHeader(t, "presigned PUT", resp, "Access-Control-Expose-Headers", "ETag")
	wantVaryOrigin(t, "presigned PUT", resp)

	resp, body = corsRequest(t, "GET", presigned(t, ep, "GET", "/"+bucket+"/k"), nil, origin)
	if resp.StatusCode != 200 || string(body) != "from the browser" {
		t.Fatalf("presigned GET with Origin: %d %q", resp.StatusCode, body)
	}
	wantHeader(t, "presigned GET", resp, "Access-Control-Allow-Origin", appOrigin)

	resp, body = corsRequest(t, "GET", presigned(t, ep, "GET", "/"+bucket+"/missing"), nil, origin)
	wantS3Error(t, "presigned GET of a missing key", resp, body, 404, "NoSuchKey")
	wantHeader(t, "presigned GET of a missing key", resp, "Access-Control-Allow-Origin", appOrigin)

	tampered := strings.Replace(presigned(t, ep, "GET", "/"+bucket+"/k"), "X-Amz-Signature=", "X-Amz-Signature=0", 1)
	tampered = tampered[:len(tampered)-1]
	resp, body = corsRequest(t, "GET", tampered, nil, origin)
	wantS3Error(t, "tampered presigned GET", resp, body, 403, "SignatureDoesNotMatch")
	wantHeader(t, "tampered presigned GET", resp, "Access-Control-Allow-Origin", appOrigin)

	resp, _ = corsRequest(t, "GET", presigned(t, ep, "GET", "/"+bucket+"/k"), nil, map[string]string{"Origin": "http://evil.example"})
	wantHeader(t, "GET from an origin no rule allows", resp, "Access-Control-Allow-Origin", "")
	wantVaryOrigin(t, "GET from an origin no rule allows", resp)

	resp, _ = corsRequest(t, "GET", presigned(t, ep, "GET", "/"+bucket+"/k"), nil, nil)
	wantHeader(t, "GET without Origin", resp, "Access-Control-Allow-Origin", "")

	// Through this gateway, a changed configuration holds at once.
	wantWireStatus(t, "delete-bucket-cors", wireExchange(t, ep, "DELETE", "/"+bucket+"?cors", nil, nil), 204)
	resp, body = preflight(t, ep, "/"+bucket+"/k", appOrigin, "PUT", "")
	wantS3Error(t, "preflight after delete-bucket-cors", resp, body, 403, "CORSResponse")
}

// --cors-allow-origins: a bucket without a configuration of its own answers
// the gateway-wide rule; a bucket with one answers its own.
func TestCORSDefaultRule(t *testing.T) {
	const defaultOrigin = "http://default.example"
	g := startGateway(t, gatewayOptions{Configure: func(c *gateway.Config) {
		c.CORSAllowOrigins = []string{defaultOrigin}
	}})
	ep := g.Endpoint
	plain, own := testenv.Bucket(t), testenv.Bucket(t)
	createBucket(t, ep, plain)
	createBucket(t, ep, own)
	putBucketCORS(t, ep, own, corsDocument)

	resp, body := preflight(t, ep, "/"+plain+"/k", defaultOrigin, "PUT", "content-type, x-amz-checksum-crc32")
	if resp.StatusCode != 200 {
		t.Fatalf("preflight under the gateway-wide rule: %d\n%s", resp.StatusCode, body)
	}
	wantHeader(t, "gateway-wide rule", resp, "Access-Control-Allow-Origin", defaultOrigin)
	resp, body = preflight(t, ep, "/"+plain+"/k", appOrigin, "PUT", "")
	wantS3Error(t, "another origin under the gateway-wide rule", resp, body, 403, "CORSResponse")
	resp, body = preflight(t, ep, "/"+own+"/k", defaultOrigin, "PUT", "")
	wantS3Error(t, "the gateway-wide origin on a bucket with its own rules", resp, body, 403, "CORSResponse")

	resp, _ = corsRequest(t, "GET", presigned(t, ep, "GET", "/"+plain+"/missing"), nil, map[string]string{"Origin": defaultOrigin})
	wantHeader(t, "GET under the gateway-wide rule", resp, "Access-Control-Allow-Origin", defaultOrigin)
}
