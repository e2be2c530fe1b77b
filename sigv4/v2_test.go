package sigv4

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// v2Vector is one of the worked examples of S3's documentation, "Signing and
// authenticating REST requests (AWS signature version 2)", with the
// documentation's example key: the request as sent and the signature the
// documentation gives for it.
type v2Vector struct {
	name          string
	method, host  string
	virtual       string // the bucket the host names
	path, query   string
	headers       []HeaderField
	now           string
	wantSignature string
}

func docTime(t testing.TB, s string) time.Time {
	t.Helper()
	tm, err := parseV2Date(s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

var v2Vectors = []v2Vector{
	{name: "object GET, virtual-hosted", method: "GET", host: "awsexamplebucket1.us-west-1.s3.amazonaws.com", virtual: "awsexamplebucket1",
		path: "/photos/puppy.jpg", headers: []HeaderField{{"Date", "Tue, 27 Mar 2007 19:36:42 +0000"}},
		now: "Tue, 27 Mar 2007 19:36:42 +0000", wantSignature: "qgk2+6Sv9/oM7G3qLEjTH1a1l1g="},
	{name: "object GET", method: "GET", host: "johnsmith.s3.amazonaws.com", virtual: "johnsmith",
		path: "/photos/puppy.jpg", headers: []HeaderField{{"Date", "Tue, 27 Mar 2007 19:36:42 +0000"}},
		now: "Tue, 27 Mar 2007 19:36:42 +0000", wantSignature: "bWq2s1WEIj+Ydj0vQ697zp+IXMU="},
	{name: "object PUT", method: "PUT", host: "johnsmith.s3.amazonaws.com", virtual: "johnsmith",
		path: "/photos/puppy.jpg", headers: []HeaderField{{"Content-Type", "image/jpeg"}, {"Content-Length", "94328"}, {"Date", "Tue, 27 Mar 2007 21:15:45 +0000"}},
		now: "Tue, 27 Mar 2007 21:16:00 +0000", wantSignature: "MyyxeRY7whkBe+bq8fHCL/2kKUg="},
	{name: "list, unsigned parameters left out", method: "GET", host: "johnsmith.s3.amazonaws.com", virtual: "johnsmith",
		path: "/", query: "prefix=photos&max-keys=50&marker=puppy", headers: []HeaderField{{"User-Agent", "Mozilla/5.0"}, {"Date", "Tue, 27 Mar 2007 19:42:41 +0000"}},
		now: "Tue, 27 Mar 2007 19:42:41 +0000", wantSignature: "htDYFYduRNen8P9ZfE/s9SuKy0U="},
	{name: "ACL, a sub-resource", method: "GET", host: "johnsmith.s3.amazonaws.com", virtual: "johnsmith",
		path: "/", query: "acl", headers: []HeaderField{{"Date", "Tue, 27 Mar 2007 19:44:46 +0000"}},
		now: "Tue, 27 Mar 2007 19:44:46 +0000", wantSignature: "c2WLPFtWHVgbEmeEG93a4cG37dM="},
	{name: "DELETE path-style with x-amz-date: the Date line is empty", method: "DELETE", host: "s3.amazonaws.com",
		path: "/johnsmith/photos/puppy.jpg", headers: []HeaderField{{"User-Agent", "dotnet"}, {"Date", "Tue, 27 Mar 2007 21:20:27 +0000"}, {"x-amz-date", "Tue, 27 Mar 2007 21:20:26 +0000"}},
		now: "Tue, 27 Mar 2007 21:20:30 +0000", wantSignature: "R4dJ53KECjStyBO5iTBJZ4XVOaI="},
	{name: "upload with amz headers, repeated and mixed case", method: "PUT", host: "static.johnsmith.net:8080", virtual: "static.johnsmith.net",
		path: "/db-backup.dat.gz", headers: []HeaderField{
			{"User-Agent", "curl/7.15.5"}, {"Date", "Tue, 27 Mar 2007 21:06:08 +0000"}, {"x-amz-acl", "public-read"},
			{"content-type", "application/x-download"}, {"Content-MD5", "4gJE4saaMU4BqNR0kLY+lw=="},
			{"X-Amz-Meta-ReviewedBy", "joe@johnsmith.net"}, {"X-Amz-Meta-ReviewedBy", "jane@johnsmith.net"},
			{"X-Amz-Meta-FileChecksum", "0x02661779"}, {"X-Amz-Meta-ChecksumAlgorithm", "crc32"},
			{"Content-Disposition", "attachment; filename=database.dat"}, {"Content-Encoding", "gzip"}, {"Content-Length", "5913339"}},
		now: "Tue, 27 Mar 2007 21:06:08 +0000", wantSignature: "ilyl83RwaSoYIEdixDQcA4OnAnc="},
	{name: "ListBuckets", method: "GET", host: "s3.amazonaws.com", path: "/",
		headers: []HeaderField{{"Date", "Wed, 28 Mar 2007 01:29:59 +0000"}},
		now:     "Wed, 28 Mar 2007 01:29:59 +0000", wantSignature: "qGdzdERIC03wnaRNKh6OqZehG9s="},
	{name: "Unicode keys: the path as sent, its escapes' case kept", method: "GET", host: "s3.amazonaws.com",
		path: "/dictionary/fran%C3%A7ais/pr%c3%a9f%c3%a8re", headers: []HeaderField{{"Date", "Wed, 28 Mar 2007 01:49:49 +0000"}},
		now: "Wed, 28 Mar 2007 01:49:49 +0000", wantSignature: "DNEZGsoieTZ92F3bUfSPQcbGmlM="},
}

func (vec *v2Vector) request(auth string) *Request {
	r := &Request{Method: vec.method, Host: vec.host, RawPath: vec.path, RawQuery: vec.query, VirtualBucket: vec.virtual}
	r.Headers = append([]HeaderField{{"Host", vec.host}}, vec.headers...)
	if auth != "" {
		r.Headers = append(r.Headers, HeaderField{"Authorization", auth})
	}
	return r
}

func TestV2DocumentationVectors(t *testing.T) {
	for _, vec := range v2Vectors {
		t.Run(vec.name, func(t *testing.T) {
			v := testVerifier(docTime(t, vec.now))
			a, err := v.Verify(vec.request("AWS " + exampleAKID + ":" + vec.wantSignature))
			if err != nil {
				t.Fatalf("the documentation's signature does not verify: %v\nstring to sign %q", err, StringToSignV2(vec.request(""), ""))
			}
			if a.AccessKeyID != exampleAKID || !a.SignatureV2 || a.Presigned || a.Payload != PayloadUnsigned {
				t.Errorf("auth %+v", a)
			}
			// One bit off: refused, with the string to sign to debug it.
			sig := []byte(vec.wantSignature)
			sig[0] ^= 1
			_, err = v.Verify(vec.request("AWS " + exampleAKID + ":" + string(sig)))
			if e := wantCode(t, err, CodeSignatureDoesNotMatch); e.Field("StringToSign") == "" || e.Status != 403 {
				t.Errorf("mismatch error %+v", e)
			}
		})
	}
}

// The documentation's query-string example: the same string to sign with
// Expires on the Date line.
func TestV2PresignedDocumentationVector(t *testing.T) {
	r := &Request{Method: "GET", Host: "johnsmith.s3.amazonaws.com", VirtualBucket: "johnsmith", RawPath: "/photos/puppy.jpg",
		RawQuery: "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1175139620&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D"}
	r.Headers = []HeaderField{{"Host", r.Host}}
	v := testVerifier(time.Unix(1175139620-60, 0))
	a, err := v.Verify(r)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Presigned || !a.SignatureV2 || a.AccessKeyID != exampleAKID {
		t.Errorf("auth %+v", a)
	}
	// At and after Expires: expired, as S3 answers.
	v = testVerifier(time.Unix(1175139620, 0))
	_, err = v.Verify(r)
	if e := wantCode(t, err, CodeAccessDenied); e.Message != "Request has expired" || e.Field("Expires") == "" || e.Field("ServerTime") == "" {
		t.Errorf("expired: %+v", e)
	}
}

// botocorePresignV2 builds a presigned URL's query the way botocore's HmacV1QueryAuth
// does (aws cli v1's `s3 presign`, boto3's default generate_presigned_url):
// Expires is now + expiresIn as epoch seconds, the signature is over the
// canonical string with Expires on the Date line, the three parameters are
// percent-encoded and appended after any query already there.
func botocorePresignV2(method, host, virtual, rawPath, rawQuery, akid, secret string, now time.Time, expiresIn int) *Request {
	expires := strconv.FormatInt(now.Unix()+int64(expiresIn), 10)
	r := &Request{Method: method, Host: host, VirtualBucket: virtual, RawPath: rawPath, RawQuery: rawQuery}
	r.Headers = []HeaderField{{"Host", host}}
	sig := SignV2(secret, StringToSignV2(r, expires))
	q := url.Values{"AWSAccessKeyId": {akid}, "Signature": {sig}, "Expires": {expires}}.Encode()
	if r.RawQuery != "" {
		q = r.RawQuery + "&" + q
	}
	r.RawQuery = q
	return r
}

func TestV2Presigned(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v := testVerifier(now)
	for _, tc := range []struct{ name, query string }{
		{"plain GET", ""},
		{"response override and version: sub-resources", "response-content-type=text%2Fplain&versionId=3%2BL"},
		{"unsigned parameters", "x-id=GetObject&foo=bar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := botocorePresignV2("GET", "127.0.0.1:9000", "", "/bucket/a%20key+plus", tc.query, exampleAKID, exampleSecret, now, 3600)
			if _, err := v.Verify(r); err != nil {
				t.Fatalf("botocore-built URL: %v", err)
			}
		})
	}
	r := botocorePresignV2("GET", "127.0.0.1:9000", "", "/bucket/k", "", exampleAKID, exampleSecret, now, 3600)

	// A sub-resource added after signing changes what is signed.
	added := r.clone()
	added.RawQuery += "&versionId=other"
	wantCode(t, verifyErr(v, added), CodeSignatureDoesNotMatch)
	// Another key, another path, another method.
	other := r.clone()
	other.RawPath = "/bucket/k2"
	wantCode(t, verifyErr(v, other), CodeSignatureDoesNotMatch)
	put := r.clone()
	put.Method = "PUT"
	wantCode(t, verifyErr(v, put), CodeSignatureDoesNotMatch)
	// Expires moved later: the signature covers it.
	later := r.clone()
	later.RawQuery = strings.Replace(later.RawQuery, "Expires=", "Expires=1", 1)
	wantCode(t, verifyErr(v, later), CodeSignatureDoesNotMatch)
	// An unknown key.
	unknown := botocorePresignV2("GET", "h", "", "/bucket/k", "", "AKIAUNKNOWN", exampleSecret, now, 60)
	wantCode(t, verifyErr(v, unknown), "InvalidAccessKeyId")
	// Expired.
	old := botocorePresignV2("GET", "h", "", "/bucket/k", "", exampleAKID, exampleSecret, now.Add(-2*time.Hour), 3600)
	e := wantCode(t, verifyErr(v, old), CodeAccessDenied)
	if e.Message != "Request has expired" {
		t.Errorf("expired URL: %q", e.Message)
	}
	// The furthest Expires there is (a URL meant never to expire) is in the
	// future, not wrapped into the past by time.Unix.
	never := &Request{Method: "GET", Host: "h", RawPath: "/bucket/k", Headers: []HeaderField{{"Host", "h"}}}
	const maxExpires = "9223372036854775807"
	never.RawQuery = url.Values{"AWSAccessKeyId": {exampleAKID}, "Expires": {maxExpires},
		"Signature": {SignV2(exampleSecret, StringToSignV2(never, maxExpires))}}.Encode()
	if _, err := v.Verify(never); err != nil {
		t.Errorf("Expires=%s: %v", maxExpires, err)
	}
	// Missing parameters.
	bare := r.clone()
	bare.RawQuery = "AWSAccessKeyId=" + exampleAKID
	wantCode(t, verifyErr(v, bare), CodeAccessDenied)
	// Turned off.
	off := testVerifier(now)
	off.DisableV2 = true
	wantCode(t, verifyErr(off, r), CodeNotImplemented)
	hdr := v2Vectors[1]
	wantCode(t, verifyErr(off, hdr.request("AWS "+exampleAKID+":"+hdr.wantSignature)), CodeNotImplemented)
}

// botocore signs a path-style bucket operation's resource as "/bucket/"
// while it sends "/bucket"; both are the bucket. An object's path gets no
// such allowance.
func TestV2BucketResourceSlash(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v := testVerifier(now)
	date := now.Format(http.TimeFormat)
	for _, tc := range []struct {
		sent, signed string
		ok           bool
	}{{"/bucket", "/bucket/", true}, {"/bucket", "/bucket", true}, {"/bucket/", "/bucket/", true},
		{"/bucket/key", "/bucket/key/", false}, {"/bucket/", "/bucket", false}} {
		signedReq := &Request{Method: "PUT", Host: "h", RawPath: tc.signed, Headers: []HeaderField{{"Host", "h"}, {"Date", date}}}
		sig := SignV2(exampleSecret, StringToSignV2(signedReq, date))
		r := &Request{Method: "PUT", Host: "h", RawPath: tc.sent,
			Headers: []HeaderField{{"Host", "h"}, {"Date", date}, {"Authorization", "AWS " + exampleAKID + ":" + sig}}}
		_, err := v.Verify(r)
		if (err == nil) != tc.ok {
			t.Errorf("sent %s, signed %s: %v, want ok %v", tc.sent, tc.signed, err, tc.ok)
		}
	}
}

func verifyErr(v *Verifier, r *Request) error {
	_, err := v.Verify(r)
	return err
}

func TestV2HeaderRefusals(t *testing.T) {
	vec := v2Vectors[1]
	good := "AWS " + exampleAKID + ":" + vec.wantSignature
	// Outside the skew window.
	v := testVerifier(docTime(t, vec.now).Add(time.Hour))
	wantCode(t, verifyErr(v, vec.request(good)), CodeRequestTimeTooSkewed)
	v = testVerifier(docTime(t, vec.now))
	// No date at all.
	r := vec.request(good).del("Date")
	wantCode(t, verifyErr(v, r), CodeAccessDenied)
	// Malformed.
	for _, bad := range []string{"AWS ", "AWS nocolon", "AWS " + exampleAKID + ":", "AWS :sig"} {
		wantCode(t, verifyErr(v, vec.request(bad)), CodeInvalidArgument)
	}
	// An amz header added after signing.
	wantCode(t, verifyErr(v, vec.request(good).set("x-amz-acl", "public-read")), CodeSignatureDoesNotMatch)
	// A date before the epoch is no date.
	wantCode(t, verifyErr(v, vec.request(good).set("x-amz-date", "Tue, 07 Jul 1950 21:53:04 GMT")), CodeAccessDenied)
	// An aws-chunked body cannot be V2-signed.
	wantCode(t, verifyErr(v, vec.request(good).set("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")), CodeInvalidRequest)
	// Two mechanisms.
	both := vec.request(good)
	both.RawQuery = "AWSAccessKeyId=" + exampleAKID + "&Expires=1&Signature=x"
	wantCode(t, verifyErr(v, both), CodeInvalidArgument)
}

// FuzzVerifyV2 sends arbitrary Authorization values and presigned queries:
// nothing panics, every refusal is an S3 error without the secret, and only
// the example key's own signature over the example request verifies.
func FuzzVerifyV2(f *testing.F) {
	vec := v2Vectors[1]
	f.Add("AWS "+exampleAKID+":"+vec.wantSignature, "")
	f.Add("AWS "+otherAKID+":"+vec.wantSignature, "")
	f.Add("", "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1175139620&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D")
	f.Add("", "AWSAccessKeyId=&Expires=-1&Signature=%zz")
	f.Add("AWS a:b:c", "acl&versionId=%")
	v := testVerifier(docTime(f, vec.now))
	v.Secrets = secrets{exampleAKID: exampleSecret, otherAKID: "a different secret"}
	f.Fuzz(func(t *testing.T, auth, query string) {
		r := vec.request(auth)
		if auth == "" {
			r = vec.request("")
		}
		r.RawQuery = query
		a, err := v.Verify(r)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("untyped error %v", err)
			}
			if strings.Contains(err.Error(), exampleSecret) {
				t.Fatal("secret leaked")
			}
			return
		}
		if a.AccessKeyID != exampleAKID && a.AccessKeyID != "" {
			t.Fatalf("verified as %q", a.AccessKeyID)
		}
	})
}

// A presigned V2 URL's x-amz-* query parameters are headers to the gateway
// (hoisted, as botocore moves them there after signing them as headers), so
// its signature must cover them: botocore's form verifies, and one added,
// changed or removed after signing does not (it would turn a PUT into a
// copy, or make the object public).
func TestV2PresignedSignsTheAmzParametersOfItsQuery(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v := testVerifier(now)
	expires := strconv.FormatInt(now.Unix()+600, 10)
	// botocore's HmacV1QueryAuth: x-amz-* headers signed as headers, then
	// sent as query parameters.
	signed := &Request{Method: "PUT", Host: "h", RawPath: "/b/upload",
		Headers: []HeaderField{{"Host", "h"}, {"x-amz-acl", "private"}, {"X-Amz-Meta-Owner", "ann"}}}
	sig := SignV2(exampleSecret, StringToSignV2(signed, expires))
	base := url.Values{"AWSAccessKeyId": {exampleAKID}, "Signature": {sig}, "Expires": {expires}}.Encode()
	sent := func(query string) *Request {
		return &Request{Method: "PUT", Host: "h", RawPath: "/b/upload", RawQuery: query, Headers: []HeaderField{{"Host", "h"}}}
	}
	if _, err := v.Verify(sent("x-amz-acl=private&x-amz-meta-owner=ann&" + base)); err != nil {
		t.Fatalf("botocore's form, its x-amz-* headers in the query: %v", err)
	}
	for name, query := range map[string]string{
		"a copy source added":        "x-amz-acl=private&x-amz-meta-owner=ann&" + base + "&x-amz-copy-source=%2Fsecret%2Fs.txt",
		"an ACL changed":             "x-amz-acl=public-read&x-amz-meta-owner=ann&" + base,
		"metadata added in any case": "x-amz-acl=private&x-amz-meta-owner=ann&" + base + "&X-Amz-Meta-Evil=1",
		"a signed parameter removed": "x-amz-acl=private&" + base,
	} {
		t.Run(name, func(t *testing.T) { wantCode(t, verifyErr(v, sent(query)), CodeSignatureDoesNotMatch) })
	}
	plain := botocorePresignV2("PUT", "h", "", "/b/upload", "", exampleAKID, exampleSecret, now, 600)
	plain.RawQuery += "&x-amz-copy-source=%2Fsecret%2Fs.txt"
	wantCode(t, verifyErr(v, plain), CodeSignatureDoesNotMatch)
}

// A V2 Authorization header signs the request's x-amz-* headers and never
// its query, so x-amz-* query parameters, which the gateway would act on as
// headers, are refused rather than taken unsigned.
func TestV2HeaderAuthRefusesAmzQueryParameters(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v := testVerifier(now)
	date := now.Format(http.TimeFormat)
	signed := &Request{Method: "PUT", Host: "h", RawPath: "/b/k", Headers: []HeaderField{{"Host", "h"}, {"Date", date}}}
	sig := SignV2(exampleSecret, StringToSignV2(signed, date))
	r := &Request{Method: "PUT", Host: "h", RawPath: "/b/k",
		Headers: []HeaderField{{"Host", "h"}, {"Date", date}, {"Authorization", "AWS " + exampleAKID + ":" + sig}}}
	if _, err := v.Verify(r); err != nil {
		t.Fatalf("the signed request: %v", err)
	}
	for _, q := range []string{"x-amz-copy-source=%2Fsecret%2Fs.txt", "X-AMZ-ACL=public-read", "x-id=PutObject&x-amz-meta-a=1"} {
		withQuery := r.clone()
		withQuery.RawQuery = q
		if e := wantCode(t, verifyErr(v, withQuery), CodeAccessDenied); !strings.Contains(e.Message, "query") {
			t.Errorf("%s: %q", q, e.Message)
		}
	}
	// Other query parameters are no headers: still verified as before.
	other := r.clone()
	other.RawQuery = "x-id=PutObject"
	if _, err := v.Verify(other); err != nil {
		t.Errorf("an unsigned non-amz parameter: %v", err)
	}
}
