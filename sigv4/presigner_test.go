package sigv4

import (
	"testing"
	"time"
)

// TestPresignQueryMatchesAWSExample: the presigned GET of AWS's SigV4
// documentation, signed by PresignQuery, is the documented query.
func TestPresignQueryMatchesAWSExample(t *testing.T) {
	at := time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC)
	got := PresignQuery(Presign{Method: "GET", Host: "examplebucket.s3.amazonaws.com", Path: "/test.txt"},
		"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1", at, 86400*time.Second)
	if got != examplePresignQuery {
		t.Fatalf("got  %s\nwant %s", got, examplePresignQuery)
	}
}
