package gateway

import (
	"math/bits"
	"net/http"
	"sort"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/store"
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
	// PermReserve: upload reservations in a bucket (reserve.go), and a
	// PutObject under one of them; write and admin grants imply it.
	PermReserve
)

func (p Permission) String() string {
	return [...]string{"authenticated", "read", "write", "admin", "reserve"}[p]
}

// Body says how an operation's request body is handled.
type Body uint8

const (
	BodyNone     Body = iota // no body expected (any sent is read and verified)
	BodySmall                // an XML or small document: read whole, verified, then forwarded
	BodyStreamed             // object data: streamed, decoded and verified on the fly
)

// Op is one S3 operation: its name, the permission it needs, how its body is
// carried, the properties of it the gateway acts on, and its handler.
type Op struct {
	Name  string
	Perm  Permission
	Level store.Level
	Body  Body
	// Publishes: a keyed write, which publishes or removes bytes at a key
	// under its lease (docs/DESIGN.md, "What counts as a write").
	Publishes bool
	// WholeObjectChecksum: the request's x-amz-checksum-* is the checksum of
	// the whole object it makes (CompleteMultipartUpload), not of its body.
	WholeObjectChecksum bool
	// ListsBuckets: the answer lists buckets; a key sees only those it has a
	// grant on, and itself as their owner (relay.go).
	ListsBuckets bool
	// SetsMetadata: the request's x-amz-meta-* headers become the object's
	// user metadata, which S3 limits to 2 KB (admit.go).
	SetsMetadata bool
	// Spooled: the body may be received whole before the key's lease is
	// taken (spool.go), when it is small enough.
	Spooled bool
	// FormAuthenticated: the request carries no header signature; its handler
	// authenticates and authorizes it from its form's signed policy (POST
	// object), so admission leaves both to it.
	FormAuthenticated bool
	// Anonymous is what a request without credentials may do with the
	// operation (anonymous.go): nothing, a read sent to the store unsigned,
	// or a write in a bucket the operator opened.
	Anonymous anonymousUse
	// Unsupported operations are answered NotImplemented, never forwarded, so
	// nothing falls through to a different operation at the store.
	Unsupported bool
	// run serves an admitted request of the operation: set on every row of
	// the table, nil only for an unsupported operation.
	run handler
}

// handler serves one admitted request.
type handler func(*Server, *fasthttp.RequestCtx, *request) *apiError

// opKey identifies a table row: method, level, the subresource that selects the
// operation ("" for none), and whether x-amz-copy-source is present.
type opKey struct {
	method string
	level  store.Level
	sub    string
	copy   bool
}

// passThrough is an operation fencegate authenticates and forwards as it is.
// anonymous gives a row what an anonymous request may do with it.
func anonymous(o Op, use anonymousUse) Op {
	o.Anonymous = use
	return o
}

func passThrough(name string, perm Permission, body Body) Op {
	return Op{Name: name, Perm: perm, Body: body, run: (*Server).forward}
}

// opTable is the one table mapping S3 requests to operations, permissions and
// handlers, built once. (No handler may read the table while it is built: the
// compiler refuses such an initialization cycle.)
var opTable = buildOpTable()

func buildOpTable() map[opKey]Op {
	const (
		G, H, P, U, D = http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodDelete
	)
	const service, bucket, object = store.LevelService, store.LevelBucket, store.LevelObject
	t := map[opKey]Op{}
	add := func(m string, l store.Level, sub string, copySrc bool, o Op) {
		o.Level = l
		t[opKey{m, l, sub, copySrc}] = o
	}
	// Service.
	add(G, service, "", false, Op{Name: "ListBuckets", Perm: PermAuthenticated, ListsBuckets: true, run: (*Server).listBuckets})
	// fencegate's reservation API (reserve_api.go): any valid key; each
	// call checks its grant on the bucket it names.
	add(U, service, apiCollection, false, Op{Name: "CreateReservation", Perm: PermAuthenticated, Body: BodySmall, run: (*Server).reservationRequest})
	add(G, service, apiCollection, false, Op{Name: "ListReservations", Perm: PermAuthenticated, run: (*Server).reservationRequest})
	add(G, service, apiItem, false, Op{Name: "GetReservation", Perm: PermAuthenticated, run: (*Server).reservationRequest})
	add(D, service, apiItem, false, Op{Name: "CancelReservation", Perm: PermAuthenticated, run: (*Server).reservationRequest})
	add(U, service, apiComplete, false, Op{Name: "CompleteReservation", Perm: PermAuthenticated, Body: BodySmall, run: (*Server).reservationRequest})

	// Bucket. Creating and deleting one changes what the catalog knows.
	add(P, bucket, "", false, Op{Name: "CreateBucket", Perm: PermAdmin, Body: BodySmall, run: (*Server).createBucket})
	add(D, bucket, "", false, Op{Name: "DeleteBucket", Perm: PermAdmin, run: (*Server).deleteBucket})
	add(H, bucket, "", false, anonymous(passThrough("HeadBucket", PermRead, BodyNone), anonymousRead))
	add(G, bucket, "", false, anonymous(passThrough("ListObjects", PermRead, BodyNone), anonymousRead))
	add(G, bucket, "list-type", false, anonymous(passThrough("ListObjectsV2", PermRead, BodyNone), anonymousRead))
	add(G, bucket, "versions", false, passThrough("ListObjectVersions", PermRead, BodyNone))
	add(G, bucket, "uploads", false, passThrough("ListMultipartUploads", PermRead, BodyNone))
	add(G, bucket, "location", false, passThrough("GetBucketLocation", PermRead, BodyNone))
	add(U, bucket, "delete", false, Op{Name: "DeleteObjects", Anonymous: anonymousWrite, Perm: PermWrite, Body: BodySmall, Publishes: true, run: (*Server).deleteObjects})
	// A browser form; authenticated by its policy (postobject.go).
	add(U, bucket, "", false, Op{Name: "PostObject", Perm: PermWrite, Body: BodyStreamed, Publishes: true, FormAuthenticated: true, run: (*Server).postObject})
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
		add(G, bucket, sub.q, false, passThrough("Get"+sub.name, PermRead, BodyNone))
		add(P, bucket, sub.q, false, passThrough("Put"+sub.name, PermAdmin, BodySmall))
		add(D, bucket, sub.q, false, passThrough("Delete"+sub.name, PermAdmin, BodyNone))
	}
	// A changed CORS configuration is read again at once (cors.go).
	for _, m := range []string{P, D} {
		o := t[opKey{m, bucket, "cors", false}]
		o.run = (*Server).changeCORS
		t[opKey{m, bucket, "cors", false}] = o
	}
	// Notification configurations live in the catalog; fencegate delivers
	// the events itself (notifications.go).
	add(G, bucket, "notification", false, Op{Name: "GetBucketNotificationConfiguration", Perm: PermRead, run: (*Server).getBucketNotification})
	add(P, bucket, "notification", false, Op{Name: "PutBucketNotificationConfiguration", Perm: PermAdmin, Body: BodySmall, run: (*Server).putBucketNotification})
	delete(t, opKey{D, bucket, "notification", false}) // S3 has no DeleteBucketNotificationConfiguration: an empty Put clears it
	add(G, bucket, "policyStatus", false, passThrough("GetBucketPolicyStatus", PermRead, BodyNone))

	// Object. The keyed writes run the write protocol (write.go).
	add(P, object, "", false, Op{Name: "PutObject", Anonymous: anonymousWrite, Perm: PermWrite, Body: BodyStreamed, Publishes: true, Spooled: true, SetsMetadata: true, run: (*Server).putObject})
	add(P, object, "", true, Op{Name: "CopyObject", Perm: PermWrite, Publishes: true, SetsMetadata: true, run: (*Server).copyObject})
	add(G, object, "", false, anonymous(passThrough("GetObject", PermRead, BodyNone), anonymousRead))
	add(H, object, "", false, anonymous(passThrough("HeadObject", PermRead, BodyNone), anonymousRead))
	add(D, object, "", false, Op{Name: "DeleteObject", Anonymous: anonymousWrite, Perm: PermWrite, Publishes: true, run: (*Server).deleteObject})
	for _, sub := range []struct{ q, name string }{
		{"tagging", "ObjectTagging"}, {"acl", "ObjectAcl"}, {"legal-hold", "ObjectLegalHold"}, {"retention", "ObjectRetention"},
	} {
		perm := PermWrite
		if sub.q == "acl" {
			perm = PermAdmin // an ACL can make an object public at the store
		}
		add(G, object, sub.q, false, passThrough("Get"+sub.name, PermRead, BodyNone))
		add(P, object, sub.q, false, passThrough("Put"+sub.name, perm, BodySmall))
	}
	add(D, object, "tagging", false, passThrough("DeleteObjectTagging", PermWrite, BodyNone))
	add(G, object, "attributes", false, passThrough("GetObjectAttributes", PermRead, BodyNone))
	// Multipart: the upload is recorded from its Create on; only its Complete
	// publishes (multipart.go).
	add(U, object, "uploads", false, Op{Name: "CreateMultipartUpload", Anonymous: anonymousWrite, Perm: PermWrite, SetsMetadata: true, run: (*Server).createUpload})
	add(P, object, "uploadId", false, anonymous(passThrough("UploadPart", PermWrite, BodyStreamed), anonymousWrite))
	add(P, object, "uploadId", true, passThrough("UploadPartCopy", PermWrite, BodyNone))
	add(U, object, "uploadId", false, Op{Name: "CompleteMultipartUpload", Anonymous: anonymousWrite, Perm: PermWrite, Body: BodySmall, Publishes: true,
		WholeObjectChecksum: true, run: (*Server).completeUpload})
	add(D, object, "uploadId", false, Op{Name: "AbortMultipartUpload", Anonymous: anonymousWrite, Perm: PermWrite, run: (*Server).abortUpload})
	add(G, object, "uploadId", false, anonymous(passThrough("ListParts", PermRead, BodyNone), anonymousWrite))
	return t
}

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

// classifyArgs maps a request to its operation from its own query, read
// where it lies; copySource reports x-amz-copy-source.
func classifyArgs(method string, bucket, key string, query *fasthttp.Args, copySource bool) Op {
	var q querySubresources
	for k := range query.All() {
		if addName(&q, k) {
			break
		}
	}
	return q.classify(method, bucket, key, copySource)
}

// querySubresources is what of a query selects an operation: which of
// selectingSubresources it names, and the first unsupported one it names.
type querySubresources struct {
	present     uint64 // bit i: selectingSubresources[i]
	unsupported string
}

// addName notes one parameter name in q; true when it is an unsupported
// one, which decides the operation whatever follows. A name as bytes (a
// request's own query) is looked up without a copy: a map index by
// string(k) copies nothing.
func addName[K string | []byte](q *querySubresources, k K) bool {
	if knownUnsupported[string(k)] {
		q.unsupported = string(k)
		return true
	}
	if i, ok := selectingIndex[string(k)]; ok {
		q.present |= 1 << i
	}
	return false
}

// selectingIndex is each selecting subresource's position in the order they
// are tried.
var selectingIndex = func() map[string]uint {
	if len(selectingSubresources) > 64 {
		panic("querySubresources.present holds 64 subresources")
	}
	m := make(map[string]uint, len(selectingSubresources))
	for i, s := range selectingSubresources {
		m[s] = uint(i)
	}
	return m
}()

func (q *querySubresources) classify(method string, bucket, key string, copySource bool) Op {
	level := store.LevelService
	if bucket != "" {
		level = store.LevelBucket
		if key != "" {
			level = store.LevelObject
		}
	}
	if q.unsupported != "" {
		return Op{Name: "Unsupported:" + q.unsupported, Level: level, Unsupported: true}
	}
	sub := ""
	if q.present != 0 {
		sub = selectingSubresources[bits.TrailingZeros64(q.present)]
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

// apiOp is the reservation API's row for method at sub (apiCollection or
// apiItem).
func apiOp(method, sub string) Op {
	if o, ok := opTable[opKey{method, store.LevelService, sub, false}]; ok {
		return o
	}
	return Op{Name: "Unsupported:" + method + " " + sub, Level: store.LevelService, Unsupported: true}
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
