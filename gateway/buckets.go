package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// The bucket-level operations fencegate acts on besides forwarding them:
// CreateBucket and DeleteBucket tell the catalog which buckets it knows
// completely; ListBuckets shows a key only the buckets it has a grant on,
// paged by fencegate.

// listBuckets reads the request's paging, then forwards it; the answer is
// paged in relay (visibleBuckets).
func (s *Server) listBuckets(ctx *fasthttp.RequestCtx, r *request) *apiError {
	page, e := parseBucketPage(ctx.QueryArgs())
	if e != nil {
		return e
	}
	r.bucketPage = page
	return s.forward(ctx, r)
}

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

// visibleBuckets is a ListBuckets answer as key sees it: the page of the
// buckets it has a grant on (hidden only where a grant names it), owned by
// it. The store's answer is read whole; its body is then empty.
func visibleBuckets(resp *http.Response, key *AccessKey, hidden string, page bucketPage) ([]byte, *apiError) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	if err != nil {
		return nil, errStoreUnreached
	}
	body = page.of(body, func(name string) bool { return key.listsBucket(name, hidden) })
	resp.Body = http.NoBody
	body = ownedBy(body, key.ID)
	resp.ContentLength = int64(len(body))
	return body, nil
}

// bucketPage is a ListBuckets request's paging: the store is asked for
// every bucket (buildUpstream sends no query) and fencegate pages what the
// key may see, so a page is never short for a bucket it hid, whether or
// not the store pages (SeaweedFS does not).
type bucketPage struct {
	max    int    // max-buckets; 0 when not given
	after  string // the continuation token's bucket: the page starts after it
	prefix string
}

// maxBuckets is S3's limit on max-buckets.
const maxBuckets = 10000

// parseBucketPage reads max-buckets, continuation-token and prefix as S3
// does: a max-buckets outside 1-10000 or a token fencegate did not make
// is 400 InvalidArgument.
func parseBucketPage(args *fasthttp.Args) (bucketPage, *apiError) {
	var p bucketPage
	if args.Has("max-buckets") {
		n, err := strconv.Atoi(string(args.Peek("max-buckets")))
		if err != nil || n < 1 || n > maxBuckets {
			return p, newAPIError("InvalidArgument", http.StatusBadRequest, "Argument max-buckets must be an integer between 1 and 10000.")
		}
		p.max = n
	}
	if tok := args.Peek("continuation-token"); len(tok) > 0 {
		name, err := base64.RawURLEncoding.DecodeString(string(tok))
		if err != nil || len(name) == 0 {
			return p, newAPIError("InvalidArgument", http.StatusBadRequest, "The continuation token provided is incorrect.")
		}
		p.after = string(name)
	}
	p.prefix = string(args.Peek("prefix"))
	return p, nil
}

// of cuts the store's whole listing doc to this page of the buckets keep
// admits: those after the token and under the prefix, at most max, with a
// ContinuationToken when more remain (S3 gives one only to a request that
// set max-buckets) and the request's Prefix. S3 lists buckets in name
// order, so a name is a token.
func (p bucketPage) of(doc []byte, keep func(name string) bool) []byte {
	var out []byte
	rest := doc
	n, last, more := 0, "", false
	for {
		i := bytes.Index(rest, []byte("<Bucket>"))
		j := -1
		if i >= 0 {
			j = bytes.Index(rest[i:], []byte("</Bucket>"))
		}
		if j < 0 {
			out = append(out, rest...)
			break
		}
		end := i + j + len("</Bucket>")
		out = append(out, rest[:i]...)
		if name := xmlElement(rest[i:end], "Name"); name > p.after && strings.HasPrefix(name, p.prefix) && keep(name) {
			if p.max > 0 && n == p.max {
				more = true
			} else {
				out = append(out, rest[i:end]...)
				n, last = n+1, name
			}
		}
		rest = rest[end:]
	}
	var tail []byte
	if more {
		tail = append(tail, "<ContinuationToken>"...)
		tail = append(tail, base64.RawURLEncoding.EncodeToString([]byte(last))...)
		tail = append(tail, "</ContinuationToken>"...)
	}
	if p.prefix != "" {
		tail = appendXMLEscaped(append(tail, "<Prefix>"...), p.prefix)
		tail = append(tail, "</Prefix>"...)
	}
	if k := bytes.LastIndex(out, []byte("</ListAllMyBucketsResult>")); k >= 0 && len(tail) > 0 {
		out = append(out[:k:k], append(tail, out[k:]...)...)
	}
	return out
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
