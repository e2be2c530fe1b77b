package gateway

import (
	"net/url"
	"strings"
)

// route finds the bucket and the decoded key a request addresses, from a
// virtual-host name under one of domains ("bucket.s3.example.com") or from the
// first path segment (path style). Both spellings, and `+` versus `%2B`, yield the
// same key bytes: the key is the percent-decoded path, where `+` stays `+`.
func route(host, rawPath string, domains []string) (bucket, key string, ok bool) {
	h := stripPort(host)
	// PathUnescape decodes %XX only: a path's `+` is a plus sign.
	path, err := url.PathUnescape(rawPath)
	if err != nil {
		return "", "", false
	}
	path = strings.TrimPrefix(path, "/")
	if b := virtualHostBucket(h, domains); b != "" {
		return b, path, true
	}
	bucket, key, _ = strings.Cut(path, "/")
	if bucket == "" && key != "" {
		// "//bucket/key": an empty bucket segment would make an object
		// request a service-level one (ListBuckets, or NotImplemented).
		return "", "", false
	}
	return bucket, key, true
}

// virtualHostBucket is the bucket a host name (without its port) names
// under one of domains, or "".
func virtualHostBucket(h string, domains []string) string {
	for _, d := range domains {
		if len(h) > len(d)+1 && strings.HasSuffix(h, d) && h[len(h)-len(d)-1] == '.' {
			return h[:len(h)-len(d)-1]
		}
	}
	return ""
}

func stripPort(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		return host[:i]
	}
	return host
}

// ValidBucketName applies S3's naming rules loosely enough for existing buckets
// (3-255 characters of letters, digits, '.', '-', '_'), so that a path like
// "/../" can never address something that is not a bucket.
func ValidBucketName(b string) bool {
	if len(b) < 3 || len(b) > 255 {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return b != ".." && b != "."
}
