package chaos

import (
	"strings"
	"testing"
)

// Every body names its value, whole; a large value's body is 2-24 MiB, a
// small one's 64 B-4 KiB, and a byte changed anywhere makes either corrupt.
func TestBodiesNameTheirValues(t *testing.T) {
	for _, v := range []string{"c1-1", "m2-7", prefixFor(bigKey, "c") + "3-9", prefixFor(bigKey, "m") + "4-2"} {
		b := bodyOf(v)
		lo, hi := 64, 4096
		if strings.HasPrefix(v, largePrefix) {
			lo, hi = largeMin, largeMin+largeSpread
		}
		if len(b) < lo || len(b) >= hi {
			t.Errorf("%s: %d bytes, want [%d, %d)", v, len(b), lo, hi)
		}
		if got := valueOfBody(b); got != v {
			t.Errorf("%s: its body names %q", v, got)
		}
		for _, at := range []int{len(b) / 2, len(b) - 1} {
			torn := append([]byte(nil), b...)
			torn[at] ^= 1
			if got := valueOfBody(torn); !strings.HasPrefix(got, "corrupt:") {
				t.Errorf("%s with byte %d changed names %q", v, at, got)
			}
		}
		if got := valueOfBody(b[:len(b)-1]); !strings.HasPrefix(got, "corrupt:") {
			t.Errorf("%s cut short names %q", v, got)
		}
	}
	if prefixFor("k0", "c") != "c" {
		t.Error("a small key's values are large")
	}
}

// A value names the write that writes it, large or not: the settle looks up
// a PUT's attempt by its checksum, and a Complete's or a copy's by its kind.
func TestValuesNameTheirWrite(t *testing.T) {
	for v, want := range map[string]string{
		"c1-1": "put", prefixFor(bigKey, "c") + "1-2": "put", "c2000-7": "put",
		"m1-3": "complete", prefixFor(bigKey, "m") + "1-4": "complete",
		"src0": "copy",
	} {
		if got := writeOf(v); got != want {
			t.Errorf("%s is written by %q, want %q", v, got, want)
		}
	}
}
