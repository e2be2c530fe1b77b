package gateway

import (
	"net/http"
	"sort"

	"github.com/fencegate/fencegate/gateway/store"
)

// Permission is what an access key needs on a bucket for an operation.
type Permission uint8

const (
	// PermAuthenticated: any valid key (ListBuckets, filtered to the key's buckets).
	PermAuthenticated Permission = iota
	PermRead
	PermWrite
	// PermAdmin: bucket creation, deletion and bucket configuration.
	PermAdmin
)

func (p Permission) String() string {
	return [...]string{"authenticated", "read", "write", "admin"}[p]
}

// Body says how an operation's request body is handled.
type Body uint8

const (
	BodyNone     Body = iota // no body expected (any sent is read and verified)
	BodySmall                // an XML or small document: read whole, verified, then forwarded
	BodyStreamed             // object data: streamed, decoded and verified on the fly
)

// Op is one S3 operation: its name, the permission it needs, and how its body
// is carried. Writes that publish or remove bytes at a key are marked Publishes;
// multipart bookkeeping is marked Tracked (docs/DESIGN.md, what counts as a write).
type Op struct {
	Name      string
	Perm      Permission
	Level     store.Level
	Body      Body
	Publishes bool
	Tracked   bool
	// Unsupported operations are answered NotImplemented, never forwarded, so
	// nothing falls through to a different operation at the store.
	Unsupported bool
}

// opKey identifies a table row: method, level, the subresource that selects the
// operation ("" for none), and whether x-amz-copy-source is present.
type opKey struct {
	method string
	level  store.Level
	sub    string
	copy   bool
}

func op(name string, perm Permission, body Body) Op { return Op{Name: name, Perm: perm, Body: body} }

// opTable is the one table mapping S3 requests to operations and permissions.
var opTable = func() map[opKey]Op {
	const (
		G, H, P, U, D = http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodDelete
	)
	t := map[opKey]Op{}
	add := func(m string, l store.Level, sub string, copySrc bool, o Op) {
		o.Level = l
		t[opKey{m, l, sub, copySrc}] = o
	}
	// Service.
	add(G, store.LevelService, "", false, op("ListBuckets", PermAuthenticated, BodyNone))

	// Bucket.
	add(P, store.LevelBucket, "", false, op("CreateBucket", PermAdmin, BodySmall))
	add(D, store.LevelBucket, "", false, op("DeleteBucket", PermAdmin, BodyNone))
	add(H, store.LevelBucket, "", false, op("HeadBucket", PermRead, BodyNone))
	add(G, store.LevelBucket, "", false, op("ListObjects", PermRead, BodyNone))
	add(G, store.LevelBucket, "list-type", false, op("ListObjectsV2", PermRead, BodyNone))
	add(G, store.LevelBucket, "versions", false, op("ListObjectVersions", PermRead, BodyNone))
	add(G, store.LevelBucket, "uploads", false, op("ListMultipartUploads", PermRead, BodyNone))
	add(G, store.LevelBucket, "location", false, op("GetBucketLocation", PermRead, BodyNone))
	deleteObjects := op("DeleteObjects", PermWrite, BodySmall)
	deleteObjects.Publishes = true
	add(U, store.LevelBucket, "delete", false, deleteObjects)
	// Bucket configuration: reads need read, changes need admin.
	for _, sub := range []struct{ q, name string }{
		{"acl", "BucketAcl"}, {"cors", "BucketCors"}, {"policy", "BucketPolicy"},
		{"lifecycle", "BucketLifecycleConfiguration"}, {"versioning", "BucketVersioning"},
		{"tagging", "BucketTagging"}, {"encryption", "BucketEncryption"},
		{"object-lock", "ObjectLockConfiguration"}, {"ownershipControls", "BucketOwnershipControls"},
		{"publicAccessBlock", "PublicAccessBlock"}, {"notification", "BucketNotificationConfiguration"},
		{"logging", "BucketLogging"}, {"website", "BucketWebsite"}, {"replication", "BucketReplication"},
		{"requestPayment", "BucketRequestPayment"}, {"accelerate", "BucketAccelerateConfiguration"},
		{"analytics", "BucketAnalyticsConfiguration"}, {"metrics", "BucketMetricsConfiguration"},
		{"inventory", "BucketInventoryConfiguration"}, {"intelligent-tiering", "BucketIntelligentTieringConfiguration"},
	} {
		add(G, store.LevelBucket, sub.q, false, op("Get"+sub.name, PermRead, BodyNone))
		add(P, store.LevelBucket, sub.q, false, op("Put"+sub.name, PermAdmin, BodySmall))
		add(D, store.LevelBucket, sub.q, false, op("Delete"+sub.name, PermAdmin, BodyNone))
	}
	add(G, store.LevelBucket, "policyStatus", false, op("GetBucketPolicyStatus", PermRead, BodyNone))

	// Object.
	put := op("PutObject", PermWrite, BodyStreamed)
	put.Publishes = true
	add(P, store.LevelObject, "", false, put)
	cp := op("CopyObject", PermWrite, BodyNone)
	cp.Publishes = true
	add(P, store.LevelObject, "", true, cp)
	add(G, store.LevelObject, "", false, op("GetObject", PermRead, BodyNone))
	add(H, store.LevelObject, "", false, op("HeadObject", PermRead, BodyNone))
	del := op("DeleteObject", PermWrite, BodyNone)
	del.Publishes = true
	add(D, store.LevelObject, "", false, del)
	for _, sub := range []struct{ q, name string }{
		{"tagging", "ObjectTagging"}, {"acl", "ObjectAcl"}, {"legal-hold", "ObjectLegalHold"}, {"retention", "ObjectRetention"},
	} {
		perm := PermWrite
		if sub.q == "acl" {
			perm = PermAdmin // an ACL can make an object public at the store
		}
		add(G, store.LevelObject, sub.q, false, op("Get"+sub.name, PermRead, BodyNone))
		add(P, store.LevelObject, sub.q, false, op("Put"+sub.name, perm, BodySmall))
	}
	add(D, store.LevelObject, "tagging", false, op("DeleteObjectTagging", PermWrite, BodyNone))
	add(G, store.LevelObject, "attributes", false, op("GetObjectAttributes", PermRead, BodyNone))
	// Multipart.
	create := op("CreateMultipartUpload", PermWrite, BodyNone)
	create.Tracked = true
	add(U, store.LevelObject, "uploads", false, create)
	add(P, store.LevelObject, "uploadId", false, op("UploadPart", PermWrite, BodyStreamed))
	add(P, store.LevelObject, "uploadId", true, op("UploadPartCopy", PermWrite, BodyNone))
	complete := op("CompleteMultipartUpload", PermWrite, BodySmall)
	complete.Publishes, complete.Tracked = true, true
	add(U, store.LevelObject, "uploadId", false, complete)
	abort := op("AbortMultipartUpload", PermWrite, BodyNone)
	abort.Tracked = true
	add(D, store.LevelObject, "uploadId", false, abort)
	add(G, store.LevelObject, "uploadId", false, op("ListParts", PermRead, BodyNone))
	return t
}()

// subresources that select an operation, in the order they are tried, so a
// request naming two (rare, e.g. ?uploadId&tagging) resolves deterministically.
var selectingSubresources = []string{
	"uploadId", "uploads", "delete", "list-type", "versions", "location", "tagging", "acl",
	"cors", "policy", "policyStatus", "lifecycle", "versioning", "encryption", "object-lock",
	"ownershipControls", "publicAccessBlock", "notification", "logging", "website", "replication",
	"requestPayment", "accelerate", "analytics", "metrics", "inventory", "intelligent-tiering",
	"legal-hold", "retention", "attributes",
}

// knownUnsupported are subresources S3 defines that fencegate does not carry.
// They are answered NotImplemented by name rather than ignored, which would turn
// e.g. `POST /b/k?restore` into something else at the store.
var knownUnsupported = map[string]bool{
	"restore": true, "select": true, "select-type": true, "torrent": true, "session": true,
	"renameObject": true, "metadataTable": true, "metadataConfiguration": true,
	"abac": true, "rename": true,
}

// Classify maps a request to its operation. hasQuery reports whether a query
// parameter is present (with any value); copySource reports x-amz-copy-source.
func Classify(method string, bucket, key string, queryKeys []string, copySource bool) Op {
	level := store.LevelService
	if bucket != "" {
		level = store.LevelBucket
		if key != "" {
			level = store.LevelObject
		}
	}
	present := make(map[string]bool, len(queryKeys))
	for _, k := range queryKeys {
		present[k] = true
		if knownUnsupported[k] {
			return Op{Name: "Unsupported:" + k, Level: level, Unsupported: true}
		}
	}
	sub := ""
	for _, s := range selectingSubresources {
		if present[s] {
			sub = s
			break
		}
	}
	if o, ok := opTable[opKey{method, level, sub, copySource && method == http.MethodPut}]; ok {
		return o
	}
	name := method + " " + [...]string{"service", "bucket", "object"}[level]
	if sub != "" {
		name += "?" + sub
	}
	return Op{Name: "Unsupported:" + name, Level: level, Unsupported: true}
}

// OpNames lists every supported operation, for metrics and documentation.
func OpNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, o := range opTable {
		if !seen[o.Name] {
			seen[o.Name] = true
			names = append(names, o.Name)
		}
	}
	sort.Strings(names)
	return names
}
