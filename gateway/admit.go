package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

// request is one admitted S3 request: routed, classified, authenticated and
// authorized, from its headers alone.
type request struct {
	id     string
	start  time.Time
	bucket string
	key    string
	op     Op
	hdr    *headerView // every header read goes through this (headers.go)
	auth   *sigv4.Auth
	akey   *AccessKey
	// bytesIn is the decoded object payload received; out counts what is relayed.
	bytesIn        int64
	out            *countingBody
	cancelUpstream func()
	// batch is the parent of a DeleteObjects' per-key store requests: a
	// shutdown that cuts the request cancels them all.
	batch      context.Context
	inflightID uint64
	// anonymousRead: a read without credentials, sent to the store unsigned
	// so that the store's own ACLs and policies decide (anonymous.go).
	anonymousRead bool
	// client is the client's address as a trusted proxy gave it ("" when
	// the connection's peer is the client).
	client string
	// host and scheme are how the client reached the gateway: the Host it
	// signed and "http" or "https" (a trusted proxy's word for both). The
	// URLs fencegate hands back start with them (clientEndpoint).
	host, scheme string
	// reservation is the upload reservation a PutObject writes under
	// ("" for none; reserve.go).
	reservation string
	// reservationDeferred: a PutObject or a browser form without a
	// reservation whose key's reservations could not be checked at
	// admission (no database): it is checked again once its body is
	// received, so a client's mistake in the body gets its own 4xx, not
	// 503 (putObject, postObject).
	reservationDeferred bool
	// bucketPage is a ListBuckets request's paging (buckets.go).
	bucketPage bucketPage

	// The parts of the request that live as long as it does, allocated with
	// it: the header view hdr points to, and what the signature check reads.
	headers headerView
	signed  sigv4.Request
}

const requestStateKey = "fencegate.request"

// newRequestID is 16 random upper-case hex digits.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	const digits = "0123456789ABCDEF"
	var id [16]byte
	for i, c := range b {
		id[2*i], id[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(id[:])
}

// methodName is the request method as a string, without a copy for the
// methods S3 uses.
func methodName(m []byte) string {
	switch string(m) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodPut:
		return http.MethodPut
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	case http.MethodDelete:
		return http.MethodDelete
	}
	return string(m)
}

// admit decides from the headers whether a request may proceed. It runs before
// any of the body is consumed: from the ExpectHandler for `Expect: 100-continue`
// requests, else at the top of the handler.
func (s *Server) admit(ctx *fasthttp.RequestCtx) (*request, *apiError) {
	r := &request{id: newRequestID(), start: time.Now()}
	h := &ctx.Request.Header
	uri := ctx.Request.URI()
	if target := h.RequestURI(); len(target) > 0 && target[0] != '/' && target[0] != '*' &&
		!bytes.EqualFold(uri.Host(), h.Host()) {
		// An absolute-form target (http://host/path) names its own host,
		// which HTTP says wins over the Host header; the signature and the
		// routing use the Host header. Two hosts: the request is ambiguous.
		return r, errInvalidURI
	}
	// Every string kept from the request line and the headers is cut from one
	// copy of their bytes (headers.go).
	signedHost, fwd := s.clientView(ctx) // the Host the client signed, through a trusted proxy (proxies.go)
	r.client = fwd.client
	var a stringArena
	a.grow(len(signedHost) + len(uri.PathOriginal()) + len(uri.QueryString()) + headerBytes(h, ctx.QueryArgs()))
	host, rawPath := a.add(signedHost), a.add(uri.PathOriginal())
	r.host, r.scheme = host, fwd.proto
	if r.scheme == "" {
		r.scheme = "http"
		if ctx.IsTLS() {
			r.scheme = "https"
		}
	}
	bucket, key, ok := route(host, rawPath, s.cfg.Domains)
	if !ok {
		return r, errInvalidURI
	}
	apiID, apiSub, api := "", "", false
	if s.reservations != nil && virtualHostBucket(stripPort(host), s.cfg.Domains) == "" {
		// fencegate's own API, on a path no bucket can have (reserve_api.go).
		if apiID, apiSub, api = apiRoute(rawPath); api {
			bucket, key = "", apiID
		}
	}
	r.bucket, r.key = bucket, key
	if bucket != "" && !ValidBucketName(bucket) {
		return r, errInvalidBucketName
	}
	hdr := &r.headers
	e := hdr.read(h, ctx.QueryArgs(), &a)
	r.hdr = hdr
	if e != nil {
		// Refused before the signature is checked: how a client's signer
		// orders two spellings of one header is its own affair.
		return r, e
	}
	copySource := hdr.get("x-amz-copy-source")
	method := methodName(ctx.Method())
	r.op = classifyArgs(method, bucket, key, ctx.QueryArgs(), copySource != "")
	if api {
		r.op = apiOp(method, apiSub)
	}
	if r.op.FormAuthenticated {
		// A browser form: authenticated and authorized by its signed policy, in the handler (postobject.go).
		return r, nil
	}

	sreq := &r.signed
	// hdr.raw holds Transfer-Encoding whenever the body comes chunked
	// (fasthttp keeps it in its header list): sigv4 learns from it that the
	// body's length is not declared, and checks it where the client signed it.
	*sreq = sigv4.Request{Method: method, Host: host, RawPath: rawPath, RawQuery: a.add(uri.QueryString()), Headers: hdr.raw}
	if len(s.cfg.Domains) > 0 {
		sreq.VirtualBucket = virtualHostBucket(stripPort(host), s.cfg.Domains)
	}
	sreq.ObjectChecksum = r.op.WholeObjectChecksum
	auth, err := s.verifier.Verify(sreq)
	switch {
	case errors.Is(err, sigv4.ErrNoCredentials):
		if e := s.admitAnonymous(r, sreq); e != nil {
			return r, e
		}
	case err != nil:
		return r, asAPIError(err)
	default:
		r.auth = auth
		r.akey = s.keys.lookup(auth.AccessKeyID)
		if r.akey == nil { // deleted between Verify and here
			return r, errAccessDenied
		}
		if r.op.Unsupported {
			return r, errNotImplemented
		}
	}
	perm := r.op.Perm
	underReservation := (r.op.Name == "PutObject" || r.op.Name == "CreateMultipartUpload") && reservationInQuery(sreq.RawQuery) != ""
	if underReservation {
		// Authorized by its reservation, checked below; the key needs a
		// grant to reserve (or write) in the bucket.
		perm = PermReserve
	}
	if hdr.grantsAccess() {
		// A canned ACL or a grant can make data public at the store.
		perm = PermAdmin
	}
	if r.anonymousRead {
		if perm == PermAdmin {
			return r, errAccessDenied
		}
	} else if !r.akey.allowed(perm, bucket) {
		// A call on a multipart upload bound to a reservation this key made
		// is the reservation's to permit (reserve_multipart.go).
		if perm != r.op.Perm || !reservedUploadOp(r.op.Name) || !r.akey.allowed(PermReserve, bucket) {
			return r, errAccessDenied
		}
		if r.reservation, e = s.admitReservedUpload(r, string(ctx.QueryArgs().Peek("uploadId"))); e != nil {
			return r, e
		}
	}
	if r.op.Level == store.LevelObject {
		if e := s.checkKey(key); e != nil {
			return r, e
		}
	}
	if r.op.SetsMetadata {
		if e := hdr.checkUserMetadata(); e != nil {
			return r, e
		}
	}
	if r.op.Body == BodyStreamed {
		// Refused from its declared size, before a byte of it is read or a
		// lease taken, as S3 does.
		n := r.auth.ContentLength
		if r.auth.Payload.Chunked() {
			n = r.auth.DecodedContentLength
		}
		if n > maxObjectSize {
			return r, asAPIError(sigv4.ErrEntityTooLarge(n, maxObjectSize))
		}
	}
	// The copy source before the reservation check, which asks the
	// database: a malformed one is the client's 400 even while the
	// database cannot answer.
	if copySource != "" {
		srcBucket, srcKey, err := parseCopySource(copySource)
		if err != nil {
			return r, err
		}
		if !r.akey.allowed(PermRead, srcBucket) {
			return r, errAccessDenied
		}
		if e := s.checkKey(srcKey); e != nil {
			return r, e
		}
	}
	if !r.anonymousRead && (underReservation || r.op.Publishes || r.op.Name == "CreateMultipartUpload") {
		n := int64(-1)
		if r.auth != nil {
			n = r.auth.ContentLength
			if r.auth.Payload.Chunked() {
				n = r.auth.DecodedContentLength
			}
		}
		if r.reservation, e = s.admitReservation(r, sreq.RawQuery, n); e != nil {
			if !deferrableReservationCheck(r, sreq.RawQuery, e) {
				return r, e
			}
			r.reservationDeferred = true
		}
	}
	return r, nil
}

// maxObjectSize is S3's limit on the data of one PutObject or UploadPart.
const maxObjectSize = 5 << 30

// parseCopySource reads x-amz-copy-source: "[/]bucket/key[?versionId=...]",
// URL-encoded.
func parseCopySource(v string) (bucket, key string, err *apiError) {
	v, _, _ = strings.Cut(v, "?")
	dec, e := url.PathUnescape(v)
	if e != nil {
		return "", "", newAPIError("InvalidArgument", 400, "Invalid copy source encoding.")
	}
	dec = strings.TrimPrefix(dec, "/")
	bucket, key, ok := strings.Cut(dec, "/")
	if !ok || key == "" || !ValidBucketName(bucket) {
		return "", "", newAPIError("InvalidArgument", 400, "Copy Source must mention the source bucket and key: sourcebucket/sourcekey.")
	}
	return bucket, key, nil
}

// errCopyOntoItself is S3's answer to a CopyObject onto its own source that
// changes nothing.
var errCopyOntoItself = newAPIError("InvalidRequest", 400,
	"This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.")

// copyOntoItself refuses a CopyObject whose source is its own destination
// (the current version: a copy of an older versionId restores it) unless it
// replaces the metadata or changes the storage class, website redirect or
// encryption, as S3 does. fencegate must decide this itself: it sends every
// copy to the store as a REPLACE (copy.go), which the store would accept.
func copyOntoItself(r *request) *apiError {
	src := r.hdr.get("x-amz-copy-source")
	bucket, key, e := parseCopySource(src)
	if e != nil || bucket != r.bucket || key != r.key {
		return nil
	}
	if _, q, ok := strings.Cut(src, "?"); ok {
		if v, err := url.ParseQuery(q); err == nil && v.Get("versionId") != "" {
			return nil
		}
	}
	if strings.EqualFold(strings.TrimSpace(r.hdr.get("x-amz-metadata-directive")), "REPLACE") {
		return nil
	}
	for _, h := range []string{"x-amz-storage-class", "x-amz-website-redirect-location", "x-amz-server-side-encryption",
		"x-amz-server-side-encryption-aws-kms-key-id", "x-amz-server-side-encryption-customer-algorithm"} {
		if r.hdr.has(h) {
			return nil
		}
	}
	return errCopyOntoItself
}
