package main

import (
	"strings"
	"testing"
)

// A grant names '*' or a bucket name a request could address: a typo such as
// "write:*x" (a pattern; grants have none) or "read:a/b" was stored as a
// grant on a bucket that can never exist, and the key silently got nothing.
func TestParseGrantsRefusesNamesNoBucketHas(t *testing.T) {
	// A revoke takes any name, so a grant stored before this check can go.
	if _, err := parseGrants([]string{"write:*x"}); err != nil {
		t.Errorf("parseGrants (revoke): %v", err)
	}
	for _, ok := range []string{"read:*", "write:photos", "admin:Legacy_Bucket.1", "reserve:uploads-2026"} {
		if _, err := newGrants([]string{ok}); err != nil {
			t.Errorf("newGrants(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"write:*x", "read:logs-*", "read:a/b", "read:ab", "admin:..", "read:buck et"} {
		if _, err := newGrants([]string{bad}); err == nil || !strings.Contains(err.Error(), "bucket") {
			t.Errorf("newGrants(%q): %v, want a bucket name error", bad, err)
		}
	}
}
