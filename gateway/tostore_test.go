package gateway

import (
	"net/http"
	"testing"

	"github.com/fencegate/fencegate/sigv4"
)

// A form's fields reach the store only as the properties S3 documents for
// POST Object: nothing that would make the store copy, rename, grant or
// replace fencegate's own headers (issue 28).
func TestPostHeadersAllowList(t *testing.T) {
	post := &sigv4.PostObject{Fields: []sigv4.HeaderField{
		{Name: "key", Value: "k"},
		{Name: "content-type", Value: "text/plain"},
		{Name: "x-amz-meta-color", Value: "blue"},
		{Name: "x-amz-storage-class", Value: "STANDARD"},
		{Name: "acl", Value: "private"},
		{Name: "x-amz-copy-source", Value: "other/secret"},
		{Name: "x-amz-copy-source-range", Value: "bytes=0-1"},
		{Name: "x-amz-metadata-directive", Value: "COPY"},
		{Name: "x-amz-rename-source", Value: "other/secret"},
		{Name: "x-amz-grant-read", Value: "uri=AllUsers"},
		{Name: "x-amz-meta-fencegate-attempt", Value: "forged"},
		{Name: "x-amz-content-sha256", Value: "UNSIGNED-PAYLOAD"},
		{Name: "x-amz-decoded-content-length", Value: "1"},
		{Name: "x-amz-checksum-crc32", Value: "AAAAAA=="},
		{Name: "x-amz-bypass-governance-retention", Value: "true"},
		{Name: "if-match", Value: "*"},
		{Name: "host", Value: "elsewhere"},
		{Name: "success_action_status", Value: "201"},
	}}
	h, e := postHeaders(post)
	if e != nil {
		t.Fatal(e)
	}
	want := http.Header{
		"Content-Type":        {"text/plain"},
		"x-amz-meta-color":    {"blue"},
		"X-Amz-Storage-Class": {"STANDARD"},
		"X-Amz-Acl":           {"private"},
	}
	if len(h) != len(want) {
		t.Fatalf("headers %v, want %v", h, want)
	}
	for k, v := range want {
		if got := h[k]; len(got) != 1 || got[0] != v[0] {
			t.Fatalf("headers %v, want %v", h, want)
		}
	}
}

// A request's own headers pass through the same list: S3's documented
// headers do, nothing else (and never fencegate's attempt id).
func TestForwardedHeaderAllowList(t *testing.T) {
	for name, want := range map[string]bool{
		"x-amz-copy-source": true, "x-amz-meta-a": true, "x-amz-grant-read": true, "content-type": true,
		"x-amz-checksum-crc32": true, "if-match": true, "x-amz-acl": true,
		"x-amz-meta-fencegate-attempt": false, "x-amz-content-sha256": false, "x-amz-date": false,
		"x-amz-rename-source": false, "x-amz-something-new": false, "cookie": false, "authorization": false,
		"x-forwarded-for": false,
	} {
		if got := forwardedHeader(name); got != want {
			t.Errorf("forwardedHeader(%q) = %v, want %v", name, got, want)
		}
	}
}
