package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

const flagReference = "../../docs/FLAGS.md"

// TestFlagReferenceIsCurrent: docs/FLAGS.md is what the commands define; with
// FENCEGATE_UPDATE_FLAGS=1 (`make flags`) it writes the file instead.
func TestFlagReferenceIsCurrent(t *testing.T) {
	var got bytes.Buffer
	if err := writeFlagReference(&got); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("FENCEGATE_UPDATE_FLAGS") == "1" {
		if err := os.WriteFile(flagReference, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(flagReference)
	if err != nil {
		t.Fatalf("%v: run `make flags`", err)
	}
	if got.String() != string(want) {
		g, w := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(g), len(w)) {
			var gl, wl string
			if i < len(g) {
				gl = g[i]
			}
			if i < len(w) {
				wl = w[i]
			}
			if gl != wl {
				t.Fatalf("docs/FLAGS.md is not what the flag definitions say: run `make flags` and commit it; first difference, line %d:\n  file: %s\n  code: %s", i+1, wl, gl)
			}
		}
	}
}

// The reference does not depend on the environment it is made in: a value
// set by a variable (perhaps a secret) is never printed as a default.
func TestFlagReferenceIgnoresEnvironment(t *testing.T) {
	var clean bytes.Buffer
	if err := writeFlagReference(&clean); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FENCEGATE_STORE_SECRET_ACCESS_KEY", "very-secret-value")
	t.Setenv("FENCEGATE_LEASE_TTL", "3m")
	var set bytes.Buffer
	if err := writeFlagReference(&set); err != nil {
		t.Fatal(err)
	}
	if clean.String() != set.String() || strings.Contains(set.String(), "very-secret-value") {
		t.Fatal("the flag reference changes with the environment")
	}
}
