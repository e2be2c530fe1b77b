package sigv4

import (
	"strings"
	"testing"
	"time"
)

// An x-amz-* header outside SignedHeaders is refused in any case, for header
// auth and for presigned URLs, even though the signature itself is valid.
func TestUnsignedAmzHeaderRefused(t *testing.T) {
	v := testVerifier(oracleNow)
	for _, name := range []string{"x-amz-copy-source", "X-Amz-Meta-Foo", "X-AMZ-TAGGING", "x-Amz-Acl"} {
		signed := signedPut(t, []byte("x"), payloadHex([]byte("x")), nil)
		if _, err := v.Verify(signed); err != nil {
			t.Fatalf("the signed request itself: %v", err)
		}
		e := wantCode(t, func() error { _, err := v.Verify(signed.clone().set(name, "v")); return err }(), CodeAccessDenied)
		if len(e.Fields) != 1 || e.Fields[0].Name != "HeadersNotSigned" || e.Fields[0].Value != strings.ToLower(name) {
			t.Fatalf("%s: fields %+v", name, e.Fields)
		}

		req := newSignedRequest(t, "PUT", "key", "", nil, nil)
		sdkPresign(t, req, 15*time.Minute, oracleNow)
		pre := fromHTTP(req)
		if _, err := v.Verify(pre); err != nil {
			t.Fatalf("the presigned request itself: %v", err)
		}
		wantCode(t, func() error { _, err := v.Verify(pre.clone().set(name, "v")); return err }(), CodeAccessDenied)
	}
}

// A signed x-amz-* header passes; a presigned URL may carry an unsigned
// x-amz-content-sha256 (S3's one exemption).
func TestSignedAmzHeadersAccepted(t *testing.T) {
	v := testVerifier(oracleNow)
	signed := signedPut(t, []byte("x"), payloadHex([]byte("x")), map[string]string{"X-Amz-Meta-Foo": "bar", "x-amz-tagging": "a=b"})
	if _, err := v.Verify(signed); err != nil {
		t.Fatal(err)
	}
	req := newSignedRequest(t, "PUT", "key", "", nil, nil)
	sdkPresign(t, req, 15*time.Minute, oracleNow)
	if _, err := v.Verify(fromHTTP(req).set("x-amz-content-sha256", "UNSIGNED-PAYLOAD")); err != nil {
		t.Fatal(err)
	}
}
