package store

import "testing"

// A listing's key is decoded only when the store says it encoded it, in S3's
// form encoding ('+' a space, "%2B" a plus).
func TestListedKey(t *testing.T) {
	for _, c := range []struct{ enc, in, want string }{
		{"url", "ctl%01a+b%2Bc%25", "ctl\x01a b+c%"},
		{"url", "plain/key", "plain/key"},
		{"", "a+b%2B", "a+b%2B"},
	} {
		if got, err := listedKey(c.enc, c.in); err != nil || got != c.want {
			t.Errorf("listedKey(%q, %q) = %q, %v; want %q", c.enc, c.in, got, err, c.want)
		}
	}
	if _, err := listedKey("url", "bad%zz"); err == nil {
		t.Error("listedKey of a malformed escape: no error")
	}
}
