package store

import (
	"net/http"
	"testing"
)

// Only SeaweedFS's answer for its own directory is no object: an empty body,
// the ETag of an upload of no parts, application/x-directory, at a key
// ending in "/". A marker written as an object (its own ETag, or another
// content type) and any key without the slash are objects.
func TestDirectoryEntry(t *testing.T) {
	h := func(etag, length, ctype string) http.Header {
		return http.Header{"Etag": {etag}, "Content-Length": {length}, "Content-Type": {ctype}}
	}
	for _, tc := range []struct {
		name string
		key  string
		h    http.Header
		want bool
	}{
		{"the store's directory", "d/", h(`"d41d8cd98f00b204e9800998ecf8427e-0"`, "0", "application/x-directory"), true},
		{"an empty marker written as an object", "d/", h(`"d41d8cd98f00b204e9800998ecf8427e"`, "0", "httpd/unix-directory"), false},
		{"a marker with a body", "d/", h(`"764efa883dda1e11db47671c4a3bbd9e"`, "3", "httpd/unix-directory"), false},
		{"no trailing slash", "d", h(`"d41d8cd98f00b204e9800998ecf8427e-0"`, "0", "application/x-directory"), false},
		{"another content type", "d/", h(`"d41d8cd98f00b204e9800998ecf8427e-0"`, "0", "binary/octet-stream"), false},
		{"a body", "d/", h(`"d41d8cd98f00b204e9800998ecf8427e-0"`, "1", "application/x-directory"), false},
	} {
		if got := DirectoryEntry(tc.key, tc.h); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
