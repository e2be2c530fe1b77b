package gateway

import "testing"

func TestRoute(t *testing.T) {
	domains := []string{"s3.local", "localhost"}
	for _, c := range []struct {
		host, path, bucket, key string
	}{
		{"127.0.0.1:9000", "/", "", ""},
		{"127.0.0.1:9000", "/b", "b", ""},
		{"127.0.0.1:9000", "/b/", "b", ""},
		{"127.0.0.1:9000", "/b/a/b%20c", "b", "a/b c"},
		{"127.0.0.1:9000", "/b/a+b", "b", "a+b"},
		{"127.0.0.1:9000", "/b/a%2Bb", "b", "a+b"},
		{"127.0.0.1:9000", "/b/a//..//c", "b", "a//..//c"},
		{"photos.s3.local:9000", "/a%2Bb", "photos", "a+b"},
		{"photos.s3.local", "/", "photos", ""},
		{"my.bucket.localhost:9000", "/k", "my.bucket", "k"},
		{"s3.local:9000", "/b/k", "b", "k"},
	} {
		b, k, ok := route(c.host, c.path, domains)
		if !ok || b != c.bucket || k != c.key {
			t.Errorf("route(%q, %q) = %q, %q, %v; want %q, %q", c.host, c.path, b, k, ok, c.bucket, c.key)
		}
	}
	if _, _, ok := route("h", "/b/%zz", nil); ok {
		t.Error("accepted a malformed escape")
	}
}
