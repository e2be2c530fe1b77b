package gateway

import "testing"

func TestClassify(t *testing.T) {
	cases := []struct {
		method, bucket, key string
		query               []string
		copySrc             bool
		want                string
		perm                Permission
	}{
		{"GET", "", "", nil, false, "ListBuckets", PermAuthenticated},
		{"PUT", "b", "", nil, false, "CreateBucket", PermAdmin},
		{"DELETE", "b", "", nil, false, "DeleteBucket", PermAdmin},
		{"GET", "b", "", nil, false, "ListObjects", PermRead},
		{"GET", "b", "", []string{"list-type", "prefix"}, false, "ListObjectsV2", PermRead},
		{"GET", "b", "", []string{"versions"}, false, "ListObjectVersions", PermRead},
		{"POST", "b", "", []string{"delete"}, false, "DeleteObjects", PermWrite},
		{"PUT", "b", "", []string{"policy"}, false, "PutBucketPolicy", PermAdmin},
		{"GET", "b", "", []string{"versioning"}, false, "GetBucketVersioning", PermRead},
		{"PUT", "b", "k", nil, false, "PutObject", PermWrite},
		{"PUT", "b", "k", nil, true, "CopyObject", PermWrite},
		{"PUT", "b", "k", []string{"partNumber", "uploadId"}, false, "UploadPart", PermWrite},
		{"PUT", "b", "k", []string{"partNumber", "uploadId"}, true, "UploadPartCopy", PermWrite},
		{"POST", "b", "k", []string{"uploads"}, false, "CreateMultipartUpload", PermWrite},
		{"POST", "b", "k", []string{"uploadId"}, false, "CompleteMultipartUpload", PermWrite},
		{"DELETE", "b", "k", []string{"uploadId"}, false, "AbortMultipartUpload", PermWrite},
		{"GET", "b", "k", []string{"uploadId"}, false, "ListParts", PermRead},
		{"GET", "b", "k", []string{"versionId", "partNumber"}, false, "GetObject", PermRead},
		{"PUT", "b", "k", []string{"tagging"}, false, "PutObjectTagging", PermWrite},
		{"DELETE", "b", "k", nil, false, "DeleteObject", PermWrite},
	}
	for _, c := range cases {
		o := Classify(c.method, c.bucket, c.key, c.query, c.copySrc)
		if o.Name != c.want || o.Perm != c.perm || o.Unsupported {
			t.Errorf("%s /%s/%s?%v copy=%v: got %s (%v, unsupported=%v), want %s (%v)",
				c.method, c.bucket, c.key, c.query, c.copySrc, o.Name, o.Perm, o.Unsupported, c.want, c.perm)
		}
	}
}

// Nothing falls through: an unknown subresource or method never turns into a
// different operation at the store (e.g. POST ?restore into something else, or
// PUT /bucket?unknown into CreateBucket).
func TestClassifyRefusesUnknown(t *testing.T) {
	for _, c := range []struct {
		method, bucket, key string
		query               []string
	}{
		{"POST", "b", "k", []string{"restore"}},
		{"POST", "b", "k", []string{"select", "select-type"}},
		{"GET", "b", "k", []string{"torrent"}},
		{"POST", "b", "k", nil},
		{"PATCH", "b", "k", nil},
		{"PUT", "", "", nil},
		{"DELETE", "", "", nil},
		{"PUT", "b", "", []string{"uploads"}},
		{"GET", "b", "k", []string{"delete"}},
	} {
		if o := Classify(c.method, c.bucket, c.key, c.query, false); !o.Unsupported {
			t.Errorf("%s /%s/%s?%v classified as %s, want unsupported", c.method, c.bucket, c.key, c.query, o.Name)
		}
	}
}

// POST to a bucket with no subresource is POST Object (a browser form),
// authenticated by its form in the handler; POST to a key with none is not.
func TestClassifyPostObject(t *testing.T) {
	if o := Classify("POST", "b", "", nil, false); o.Name != "PostObject" || o.Perm != PermWrite || !o.Publishes {
		t.Fatalf("POST /b: %+v", o)
	}
}

func TestPublishingOpsAreMarked(t *testing.T) {
	publishes := map[string]bool{"PutObject": true, "CopyObject": true, "CompleteMultipartUpload": true, "DeleteObject": true, "DeleteObjects": true, "PostObject": true}
	for _, o := range opTable {
		if o.Publishes != publishes[o.Name] {
			t.Errorf("%s: Publishes=%v", o.Name, o.Publishes)
		}
	}
}
