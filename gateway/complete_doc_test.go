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
		code string // "" for a document that is sent
	}{
		{"one part", `<?xml version="1.0"?><CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` + part + `</CompleteMultipartUpload>`, ""},
		{"parts 1, 3", `<CompleteMultipartUpload>` + part + `<Part><PartNumber> 3 </PartNumber></Part></CompleteMultipartUpload>`, ""},
		{"a number split by a comment", `<CompleteMultipartUpload>` + part + `<Part><PartNumber>1<!-- -->2</PartNumber></Part></CompleteMultipartUpload>`, ""},
		{"another root", `<Delete>` + part + `</Delete>`, "MalformedXML"},
		{"nested 100,000 deep", deep, "MalformedXML"},
		{"unclosed", `<CompleteMultipartUpload>` + part, "MalformedXML"},
		{"two roots", `<CompleteMultipartUpload/><CompleteMultipartUpload/>`, "MalformedXML"},
		{"mismatched", `<CompleteMultipartUpload><Part></ETag></CompleteMultipartUpload>`, "MalformedXML"},
		{"empty", ``, "MalformedXML"},
		{"no part", `<CompleteMultipartUpload></CompleteMultipartUpload>`, "MalformedXML"},
		{"a number that is not one", `<CompleteMultipartUpload><Part><PartNumber>one</PartNumber></Part></CompleteMultipartUpload>`, "MalformedXML"},
		{"parts 2, 1", `<CompleteMultipartUpload><Part><PartNumber>2</PartNumber></Part>` + part + `</CompleteMultipartUpload>`, "InvalidPartOrder"},
		{"parts 1, 2, 1", `<CompleteMultipartUpload>` + part + `<Part><PartNumber>2</PartNumber></Part>` + part + `</CompleteMultipartUpload>`, "InvalidPartOrder"},
		// ceph/s3-tests' test_multipart_resend_first_finishes_last.
		{"part 1 twice", `<CompleteMultipartUpload>` + part + part + `</CompleteMultipartUpload>`, ""},
	} {
		got := ""
		if e := completeDocument([]byte(tc.doc)); e != nil {
			got = e.Code
		}
		if got != tc.code {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.code)
		}
	}
}
