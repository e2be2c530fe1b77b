package console

import "testing"

// A key's address keeps its slashes and escapes the rest of each segment.
// (Keys with an empty, "." or ".." segment, which a path would be cleaned of,
// are refused by the gateway: gateway/keyname.go.)
func TestKeyURL(t *testing.T) {
	for key, want := range map[string]string{
		"dir/history key": "/console/keys/b/dir/history%20key",
		"a?b#c":           "/console/keys/b/a%3Fb%23c",
		"50%/é":           "/console/keys/b/50%25/%C3%A9",
	} {
		if got := keyURL("b", key); got != want {
			t.Errorf("keyURL(%q) = %q, want %q", key, got, want)
		}
	}
}
