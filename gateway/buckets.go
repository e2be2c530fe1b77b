package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"

	"github.com/valyala/fasthttp"
)

// The bucket-level operations fencegate acts on besides forwarding them:
// CreateBucket and DeleteBucket tell the catalog which buckets it knows
// completely; ListBuckets shows a key only the buckets it has a grant on.

// createBucket passes CreateBucket through; a bucket created through
// fencegate is complete (every key in it is known).
func (s *Server) createBucket(ctx *fasthttp.RequestCtx, r *request) *apiError {
	return s.forwardBucketChange(ctx, r, s.deps.Buckets.BucketCreated)
}

// deleteBucket passes DeleteBucket through; a deleted bucket is forgotten.
func (s *Server) deleteBucket(ctx *fasthttp.RequestCtx, r *request) *apiError {
	return s.forwardBucketChange(ctx, r, s.deps.Buckets.BucketDeleted)
}

// forwardBucketChange forwards the request and, when the store did it,
// records the change.
func (s *Server) forwardBucketChange(ctx *fasthttp.RequestCtx, r *request, record func(ctx context.Context, bucket string) error) *apiError {
	if e := s.forward(ctx, r); e != nil {
		return e
	}
	if ctx.Response.StatusCode()/100 != 2 {
		return nil
	}
	dctx, cancel := s.dbctx()
	defer cancel()
	if err := record(dctx, r.bucket); err != nil {
		s.deps.Log.Warn("could not record a bucket change", "bucket", r.bucket, "err", err)
	}
	return nil
}

// hiddenBucket is the start-up probe's bucket ("" before a probe): a
// grant on every bucket does not list it, since it holds none of the
// clients' data.
func (s *Server) hiddenBucket() string {
	if b := s.probeBucket.Load(); b != nil {
		return *b
	}
	return ""
}

// visibleBuckets is a ListBuckets answer as key sees it: the buckets it has a
// grant on (hidden only where a grant names it), owned by it. The store's
// answer is read whole; its body is then empty.
func visibleBuckets(resp *http.Response, key *AccessKey, hidden string) ([]byte, *apiError) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	if err != nil {
		return nil, errStoreUnreached
	}
	if !key.seesAllBuckets() || hidden != "" {
		body = filterBuckets(body, key, hidden)
	}
	resp.Body = http.NoBody
	body = ownedBy(body, key.ID)
	resp.ContentLength = int64(len(body))
	return body, nil
}

// ownedBy names the access key as the owner in a ListBuckets answer: the
// store's own identity (fencegate's backend account) is not the client's
// business.
func ownedBy(doc []byte, keyID string) []byte {
	i := bytes.Index(doc, []byte("<Owner>"))
	if i < 0 {
		return doc
	}
	j := bytes.Index(doc[i:], []byte("</Owner>"))
	if j < 0 {
		return doc
	}
	owner := appendXMLEscaped([]byte("<Owner><ID>"), keyID)
	owner = append(owner, "</ID><DisplayName>"...)
	owner = appendXMLEscaped(owner, keyID)
	owner = append(owner, "</DisplayName></Owner>"...)
	out := append(append(append([]byte(nil), doc[:i]...), owner...), doc[i+j+len("</Owner>"):]...)
	return out
}

// filterBuckets drops from a ListBuckets answer the buckets key has no grant
// on, and hidden unless a grant names it.
func filterBuckets(doc []byte, key *AccessKey, hidden string) []byte {
	var out []byte
	rest := doc
	for {
		i := bytes.Index(rest, []byte("<Bucket>"))
		if i < 0 {
			return append(out, rest...)
		}
		j := bytes.Index(rest[i:], []byte("</Bucket>"))
		if j < 0 {
			return append(out, rest...)
		}
		end := i + j + len("</Bucket>")
		out = append(out, rest[:i]...)
		if key.listsBucket(xmlElement(rest[i:end], "Name"), hidden) {
			out = append(out, rest[i:end]...)
		}
		rest = rest[end:]
	}
}
