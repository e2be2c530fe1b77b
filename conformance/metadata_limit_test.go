package conformance

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// User metadata is limited to 2 KB as in S3 (the sum of each key's and
// value's bytes, the key without its x-amz-meta- prefix): past it a
// PutObject, a CreateMultipartUpload and a POST form are 400
// MetadataTooLarge and nothing lands; exactly 2 KB is accepted.
func TestMetadataTooLarge(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-metasize-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	meta := func(total int) map[string]string {
		// Two keys "a" and "b": values fill the rest.
		v := total - 2
		return map[string]string{"x-amz-meta-a": strings.Repeat("x", v/2), "x-amz-meta-b": strings.Repeat("y", v-v/2)}
	}
	if r := putRaw(g.Endpoint, bucket, "at-limit", []byte("x"), meta(2048)); r.Status != 200 {
		t.Fatalf("PUT with 2,048 bytes of metadata: %+v", r)
	}
	for _, size := range []int{2049, 3 << 10, 12 << 10} {
		r := putRaw(g.Endpoint, bucket, "over", []byte("x"), meta(size))
		if r.Status != http.StatusBadRequest || r.Code != "MetadataTooLarge" {
			t.Fatalf("PUT with %d bytes of metadata: %+v, want 400 MetadataTooLarge", size, r)
		}
	}
	assertNothingLanded(t, g, bucket, "over")
	if r := doRaw(g.Endpoint, "POST", "/"+bucket+"/mpu?uploads", nil, meta(3<<10)); r.Status != http.StatusBadRequest || r.Code != "MetadataTooLarge" {
		t.Fatalf("CreateMultipartUpload with 3 KiB of metadata: %+v, want 400 MetadataTooLarge", r)
	}
	fields := []formField{{"key", "form-over"}}
	conds := []any{map[string]string{"bucket": bucket}, map[string]string{"key": "form-over"}}
	for k, v := range meta(3 << 10) {
		fields = append(fields, formField{k, v})
		conds = append(conds, map[string]string{k: v})
	}
	fields = append(fields, postPolicy(g.Endpoint, time.Now().Add(time.Hour), conds...)...)
	resp, b := postForm(t, g.URL, bucket, fields, "f", []byte("x"))
	if resp.StatusCode != http.StatusBadRequest || errorCode(b) != "MetadataTooLarge" {
		t.Fatalf("a form with 3 KiB of metadata: %s %s, want 400 MetadataTooLarge", resp.Status, b)
	}
	assertNothingLanded(t, g, bucket, "form-over")
}
