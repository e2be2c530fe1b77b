package gateway

import (
	"strings"
	"testing"
)

// A Complete document is sent to the store only when it is well-formed,
// rooted at CompleteMultipartUpload and no deeper than its schema.
func TestCompleteDocument(t *testing.T) {
	part := `<Part><PartNumber>1</PartNumber><ETag>"e"</ETag></Part>`
	deep := "<CompleteMultipartUpload>" + strings.Repeat("<a>", 100_000) + strings.Repeat("</a>", 100_000) + "</CompleteMultipartUpload>"
	for _, tc := range []struct {
		name string
		doc  string
		ok   bool
	}{
		{"one part", `<?xml version="1.0"?><CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` + part + `</CompleteMultipartUpload>`, true},
		{"another root", `<Delete>` + part + `</Delete>`, false},
		{"nested 100,000 deep", deep, false},
		{"unclosed", `<CompleteMultipartUpload>` + part, false},
		{"two roots", `<CompleteMultipartUpload/><CompleteMultipartUpload/>`, false},
		{"mismatched", `<CompleteMultipartUpload><Part></ETag></CompleteMultipartUpload>`, false},
		{"empty", ``, false},
	} {
		if got := completeDocument([]byte(tc.doc)); got != tc.ok {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.ok)
		}
	}
}
