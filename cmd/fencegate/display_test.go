package main

import "testing"

func TestShownQuotesOnlyWhatDoesNotPrint(t *testing.T) {
	for in, want := range map[string]string{
		"photos/2026/a b+c.jpg": "photos/2026/a b+c.jpg",
		"café ﬁ":                "café ﬁ",
		"x\x1b[2Ky":             `"x\x1b[2Ky"`,
		"tab\there":             `"tab\there"`,
		"nl\n":                  `"nl\n"`,
		"del\x7f":               `"del\x7f"`,
		"nbsp\u00a0":            `"nbsp\u00a0"`,
		"bidi\u202e":            `"bidi\u202e"`,
	} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %s, want %s", in, got, want)
		}
	}
}
