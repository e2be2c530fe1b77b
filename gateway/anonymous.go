package gateway

import (
	"strings"

	"github.com/fencegate/fencegate/sigv4"
)

// Requests without credentials (no Authorization header, no presigned query).
//
// Reads of objects and listings of buckets are sent to the store unsigned:
// the store's own ACLs and bucket policies decide, exactly as for a client
// talking to the store, and fencegate's credentials never lend their access
// to them (signed with them, every object would be public through fencegate).
//
// Writes are refused (AccessDenied) unless the operator opened the bucket for
// them (Config.AnonymousWriteBuckets, --anonymous-write-buckets): there they
// are keyed writes like any other, run through the write protocol and sent
// with fencegate's credentials, since the attempt id and the fence must reach
// the store. Nothing else is open to them: ACLs still need an admin key, and
// bucket operations, configuration and copies need a key.

// anonymousUse is what a request without credentials may do with an
// operation (Op.Anonymous).
type anonymousUse uint8

const (
	anonymousNone  anonymousUse = iota
	anonymousRead               // sent to the store unsigned
	anonymousWrite              // only in a bucket the operator opened
)

// anonymousID stands for the client in logs; no access key has this form
// (keys are upper-case letters and digits).
const anonymousID = "anonymous"

// admitAnonymous decides about a request without credentials: r.op is
// classified, nothing else is set yet.
func (s *Server) admitAnonymous(r *request, sreq *sigv4.Request) *apiError {
	switch {
	case r.op.Unsupported, r.bucket == "":
		return errAccessDenied
	case r.op.Anonymous == anonymousRead:
		r.anonymousRead = true
	case r.op.Anonymous == anonymousWrite && s.anonymousWriteBucket(r.bucket):
	default:
		return errAccessDenied
	}
	auth, err := sigv4.Anonymous(sreq)
	if err != nil {
		return asAPIError(err)
	}
	auth.AccessKeyID = anonymousID
	r.auth = auth
	// No grant but write on an open bucket: an ACL (admin) or a copy source
	// (read) is refused by admit's own checks.
	r.akey = &AccessKey{ID: anonymousID}
	if !r.anonymousRead {
		r.akey.Grants = []Grant{{Bucket: r.bucket, Perm: PermWrite}}
	}
	return nil
}

func (s *Server) anonymousWriteBucket(bucket string) bool {
	for _, b := range s.cfg.AnonymousWriteBuckets {
		if strings.TrimSpace(b) == bucket {
			return true
		}
	}
	return false
}
