package gateway

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/store"
)

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
		o := classifyQuery(c.method, c.bucket, c.key, c.query, c.copySrc)
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
		if o := classifyQuery(c.method, c.bucket, c.key, c.query, false); !o.Unsupported {
			t.Errorf("%s /%s/%s?%v classified as %s, want unsupported", c.method, c.bucket, c.key, c.query, o.Name)
		}
	}
}

// POST to a bucket with no subresource is POST Object (a browser form),
// authenticated by its form in the handler; POST to a key with none is not.
func TestClassifyPostObject(t *testing.T) {
	if o := classifyQuery("POST", "b", "", nil, false); o.Name != "PostObject" || o.Perm != PermWrite || !o.Publishes {
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

// opRequests is a request for every row of the operation table: "METHOD
// /path?subresource[&another] [copy] Operation" (copy: with x-amz-copy-source).
var opRequests = []string{
	"DELETE /b DeleteBucket",
	"DELETE /b/k DeleteObject",
	"DELETE /b/k?tagging DeleteObjectTagging",
	"DELETE /b/k?uploadId AbortMultipartUpload",
	"DELETE /b?accelerate DeleteBucketAccelerateConfiguration",
	"DELETE /b?acl DeleteBucketAcl",
	"DELETE /b?analytics DeleteBucketAnalyticsConfiguration",
	"DELETE /b?cors DeleteBucketCors",
	"DELETE /b?encryption DeleteBucketEncryption",
	"DELETE /b?intelligent-tiering DeleteBucketIntelligentTieringConfiguration",
	"DELETE /b?inventory DeleteBucketInventoryConfiguration",
	"DELETE /b?lifecycle DeleteBucketLifecycleConfiguration",
	"DELETE /b?logging DeleteBucketLogging",
	"DELETE /b?metrics DeleteBucketMetricsConfiguration",
	"DELETE /b?object-lock DeleteObjectLockConfiguration",
	"DELETE /b?ownershipControls DeleteBucketOwnershipControls",
	"DELETE /b?policy DeleteBucketPolicy",
	"DELETE /b?publicAccessBlock DeletePublicAccessBlock",
	"DELETE /b?replication DeleteBucketReplication",
	"DELETE /b?requestPayment DeleteBucketRequestPayment",
	"DELETE /b?tagging DeleteBucketTagging",
	"DELETE /b?versioning DeleteBucketVersioning",
	"DELETE /b?website DeleteBucketWebsite",
	"GET / ListBuckets",
	"GET /b ListObjects",
	"GET /b/k GetObject",
	"GET /b/k?acl GetObjectAcl",
	"GET /b/k?attributes GetObjectAttributes",
	"GET /b/k?legal-hold GetObjectLegalHold",
	"GET /b/k?retention GetObjectRetention",
	"GET /b/k?tagging GetObjectTagging",
	"GET /b/k?uploadId ListParts",
	"GET /b?accelerate GetBucketAccelerateConfiguration",
	"GET /b?acl GetBucketAcl",
	"GET /b?analytics GetBucketAnalyticsConfiguration",
	"GET /b?cors GetBucketCors",
	"GET /b?encryption GetBucketEncryption",
	"GET /b?intelligent-tiering GetBucketIntelligentTieringConfiguration",
	"GET /b?inventory GetBucketInventoryConfiguration",
	"GET /b?lifecycle GetBucketLifecycleConfiguration",
	"GET /b?list-type ListObjectsV2",
	"GET /b?location GetBucketLocation",
	"GET /b?logging GetBucketLogging",
	"GET /b?metrics GetBucketMetricsConfiguration",
	"GET /b?notification GetBucketNotificationConfiguration",
	"GET /b?object-lock GetObjectLockConfiguration",
	"GET /b?ownershipControls GetBucketOwnershipControls",
	"GET /b?policy GetBucketPolicy",
	"GET /b?policyStatus GetBucketPolicyStatus",
	"GET /b?publicAccessBlock GetPublicAccessBlock",
	"GET /b?replication GetBucketReplication",
	"GET /b?requestPayment GetBucketRequestPayment",
	"GET /b?tagging GetBucketTagging",
	"GET /b?uploads ListMultipartUploads",
	"GET /b?versioning GetBucketVersioning",
	"GET /b?versions ListObjectVersions",
	"GET /b?website GetBucketWebsite",
	"HEAD /b HeadBucket",
	"HEAD /b/k HeadObject",
	"POST /b/k?uploadId CompleteMultipartUpload",
	"POST /b/k?uploads CreateMultipartUpload",
	"POST /b?delete DeleteObjects",
	"POST /b PostObject",
	"PUT /b CreateBucket",
	"PUT /b/k PutObject",
	"PUT /b/k copy CopyObject",
	"PUT /b/k?acl PutObjectAcl",
	"PUT /b/k?legal-hold PutObjectLegalHold",
	"PUT /b/k?partNumber&uploadId UploadPart",
	"PUT /b/k?partNumber&uploadId copy UploadPartCopy",
	"PUT /b/k?retention PutObjectRetention",
	"PUT /b/k?tagging PutObjectTagging",
	"PUT /b?accelerate PutBucketAccelerateConfiguration",
	"PUT /b?acl PutBucketAcl",
	"PUT /b?analytics PutBucketAnalyticsConfiguration",
	"PUT /b?cors PutBucketCors",
	"PUT /b?encryption PutBucketEncryption",
	"PUT /b?intelligent-tiering PutBucketIntelligentTieringConfiguration",
	"PUT /b?inventory PutBucketInventoryConfiguration",
	"PUT /b?lifecycle PutBucketLifecycleConfiguration",
	"PUT /b?logging PutBucketLogging",
	"PUT /b?metrics PutBucketMetricsConfiguration",
	"PUT /b?notification PutBucketNotificationConfiguration",
	"PUT /b?object-lock PutObjectLockConfiguration",
	"PUT /b?ownershipControls PutBucketOwnershipControls",
	"PUT /b?policy PutBucketPolicy",
	"PUT /b?publicAccessBlock PutPublicAccessBlock",
	"PUT /b?replication PutBucketReplication",
	"PUT /b?requestPayment PutBucketRequestPayment",
	"PUT /b?tagging PutBucketTagging",
	"PUT /b?versioning PutBucketVersioning",
	"PUT /b?website PutBucketWebsite",
}

// Every row of the table has a handler, a permission and a test request that
// classifies to it; every test request names a supported operation.
func TestEveryOperationIsServed(t *testing.T) {
	served := map[string]bool{}
	for _, line := range opRequests {
		f := strings.Fields(line)
		method, target, want := f[0], f[1], f[len(f)-1]
		path, query, _ := strings.Cut(target, "?")
		bucket, key, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
		var keys []string
		if query != "" {
			keys = strings.Split(query, "&")
		}
		o := classifyQuery(method, bucket, key, keys, len(f) == 4 && f[2] == "copy")
		if o.Name != want || o.Unsupported || o.run == nil {
			t.Errorf("%q: classified as %s (unsupported=%v, handler=%v)", line, o.Name, o.Unsupported, o.run != nil)
		}
		served[o.Name] = true
	}
	// The reservation API's rows are selected by its path (reserve_api.go).
	for _, line := range []string{
		"POST /_fencegate/reservations CreateReservation", "GET /_fencegate/reservations ListReservations",
		"GET /_fencegate/reservations/0b2e2f8e-0000-4000-8000-000000000000 GetReservation",
		"DELETE /_fencegate/reservations/0b2e2f8e-0000-4000-8000-000000000000 CancelReservation",
		"POST /_fencegate/reservations/0b2e2f8e-0000-4000-8000-000000000000/complete CompleteReservation",
	} {
		f := strings.Fields(line)
		_, sub, ok := apiRoute(f[1])
		if o := apiOp(f[0], sub); !ok || o.Name != f[2] || o.run == nil {
			t.Errorf("%q: routed %v, classified as %s", line, ok, o.Name)
		}
		served[f[2]] = true
	}
	names := map[string]bool{}
	for k, o := range opTable {
		switch {
		case names[o.Name]:
			t.Errorf("%s names two rows", o.Name)
		case o.run == nil:
			t.Errorf("%s has no handler", o.Name)
		case o.Perm > PermAdmin || o.Perm == PermAuthenticated && k.level != store.LevelService:
			t.Errorf("%s needs permission %v", o.Name, o.Perm)
		case !served[o.Name]:
			t.Errorf("%s (%s %v ?%s copy=%v) has no test request", o.Name, k.method, k.level, k.sub, k.copy)
		}
		names[o.Name] = true
	}
}

// Classifying a request by its own query reads the parameter names where
// they lie: no copy per request (addName).
func TestClassifyArgsCopiesNothing(t *testing.T) {
	var a fasthttp.Args
	a.Parse("uploadId=abc&partNumber=3&x-id=UploadPart")
	allocs := testing.AllocsPerRun(100, func() {
		if op := classifyArgs("PUT", "b", "k", &a, false); op.Name != "UploadPart" {
			t.Fatalf("classified as %s, want UploadPart", op.Name)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per classification, want 0", allocs)
	}
}

// classifyQuery is classifyArgs of a query given as its parameter names. queryKeys are the names of its
// query parameters (with any value); copySource reports x-amz-copy-source.
func classifyQuery(method string, bucket, key string, queryKeys []string, copySource bool) Op {
	var q querySubresources
	for _, k := range queryKeys {
		if addName(&q, k) {
			break
		}
	}
	return q.classify(method, bucket, key, copySource)
}
