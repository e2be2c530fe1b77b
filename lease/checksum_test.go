package lease

import "testing"

// An attempt's checksum is compared with the store's checksum of the same
// algorithm, wherever the store lists it among several; other algorithms,
// or none, prove nothing (issue 27, item 10).
func TestChecksumsDifferLikeWithLike(t *testing.T) {
	for _, tc := range []struct {
		attempt, store string
		differ         bool
	}{
		{"crc32:AAAA", "crc32:AAAA", false},
		{"crc32:AAAA", "crc32:BBBB", true},
		{"crc32:AAAA", "sha256:CCCC", false},
		{"crc32:AAAA", "crc32:AAAA sha256:CCCC", false},
		{"crc32:AAAA", "crc32:BBBB sha256:CCCC", true},
		{"crc32:AAAA", "crc64nvme:DDDD crc32:BBBB", true},
		{"sha256:CCCC", "crc32:BBBB sha256:CCCC", false},
		{"", "crc32:BBBB", false},
		{"crc32:AAAA", "", false},
	} {
		if got := checksumsDiffer(tc.attempt, tc.store); got != tc.differ {
			t.Errorf("checksumsDiffer(%q, %q) = %v, want %v", tc.attempt, tc.store, got, tc.differ)
		}
	}
}
