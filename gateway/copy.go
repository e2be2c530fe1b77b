package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/store"
)

// restatedOnCopy are the system headers a COPY directive carries over from the
// source; fencegate restates them when it turns COPY into REPLACE.
var restatedOnCopy = []string{"Content-Type", "Content-Encoding", "Content-Disposition", "Content-Language",
	"Cache-Control", "Expires", "X-Amz-Website-Redirect-Location"}

// copyObject publishes a copy at the destination key under its lease. The new
// object must carry a fresh attempt id, which needs MetadataDirective REPLACE:
// a COPY becomes REPLACE with the source's metadata and system headers restated.
// Every copy is pinned to the source version that was read
// (x-amz-copy-source-if-match on its ETag).
func (s *Server) copyObject(ctx *fasthttp.RequestCtx, r *request) *apiError {
	if e := copyOntoItself(r); e != nil {
		return e
	}
	src := r.hdr.get("x-amz-copy-source")
	srcBucket, srcKey, _ := parseCopySource(src)
	versionID := ""
	if _, q, ok := strings.Cut(src, "?"); ok {
		if v, err := url.ParseQuery(q); err == nil {
			versionID = v.Get("versionId")
		}
	}
	hctx, cancel := context.WithTimeout(context.Background(), store.HeadTimeout)
	info, err := s.store.HeadVersion(hctx, srcBucket, srcKey, versionID)
	cancel()
	if err != nil {
		// Never a copy without its source read: it would be unleased and
		// unattributed. Nothing was sent.
		var se *store.StatusError
		if errors.As(err, &se) && se.Status == http.StatusBadRequest {
			return newAPIError("InvalidArgument", http.StatusBadRequest, "Invalid copy source (version id).")
		}
		if errors.As(err, &se) && se.Status == http.StatusForbidden {
			return errAccessDenied
		}
		if errors.Is(err, store.ErrNoSuchBucket) {
			return errNoSuchBucket // the source's bucket, as S3 answers
		}
		s.deps.Log.Warn("HEAD of a copy source failed", "request_id", r.id, "err", err)
		return errStoreUnreached
	}
	if !info.Exists {
		return errNoSuchKey
	}
	if e := copySourceConditions(r.hdr, info); e != nil {
		return e
	}
	replace := strings.EqualFold(strings.TrimSpace(r.hdr.get("x-amz-metadata-directive")), "REPLACE")
	u, e := s.buildUpstream(ctx, r)
	if e != nil {
		return e
	}
	defer u.finish(r)
	declared := info.Size
	return s.writeKey(ctx, r, u, keyWrite{
		WriteRequest: lease.WriteRequest{Kind: lease.KindCopy, DeclaredSize: declared,
			ClientConditional: hasClientCondition(r), OtherCondition: hasConditionBesideFence(r)},
		prepare: func(u *upstream, t lease.Try) *apiError {
			h := u.req.Header
			if !replace {
				for k := range h {
					lk := strings.ToLower(k)
					if strings.HasPrefix(lk, "x-amz-meta-") || lk == "x-amz-metadata-directive" {
						delete(h, k)
					}
					for _, sys := range restatedOnCopy {
						if strings.EqualFold(k, sys) {
							delete(h, k)
						}
					}
				}
				for k, vs := range info.Header {
					lk := strings.ToLower(k)
					if strings.HasPrefix(lk, "x-amz-meta-") && lk != store.AttemptHeader {
						h[lk] = vs // S3's metadata names are lower case
					}
				}
				for _, sys := range restatedOnCopy {
					if v := info.Header.Get(sys); v != "" {
						h.Set(sys, v)
					}
				}
				h.Set("X-Amz-Metadata-Directive", "REPLACE")
			}
			// The copy is of the version that was read: its size is the one
			// recorded, and what COPY restated is that version's. A client's
			// own x-amz-copy-source-if-match allows that version
			// (copySourceConditions checked it), so the pin replaces it: a
			// list or * would let other bytes be copied under the size read
			// here. A source changed since is a 412 the client retries (503).
			h.Set("X-Amz-Copy-Source-If-Match", `"`+info.ETag+`"`)
			h.Set(store.AttemptHeader, t.AttemptID)
			return nil
		},
		acknowledge: func(resp *http.Response) (lease.Landed, *apiError) {
			body, e := readResult(resp)
			if e != nil {
				return lease.Landed{}, e
			}
			return lease.Landed{ETag: store.TrimETag(xmlElement(body, "ETag")), Size: declared}, nil
		},
	})
}

var errNoSuchKey = newAPIError("NoSuchKey", http.StatusNotFound, "The specified key does not exist.")

var errPreconditionFailed = newAPIError("PreconditionFailed", http.StatusPreconditionFailed,
	"At least one of the pre-conditions you specified did not hold")

// copySourceConditions evaluates the client's x-amz-copy-source-if-* against
// the source that was read, as S3 does. They are answered here because the
// store's 412 for the copy would be indistinguishable from a refusal of
// fencegate's own fence on the destination.
func copySourceConditions(h *headerView, src store.Object) *apiError {
	etag := src.ETag
	lastMod, lmErr := http.ParseTime(src.Header.Get("Last-Modified"))
	ifMatch, ifNone := h.get("x-amz-copy-source-if-match"), h.get("x-amz-copy-source-if-none-match")
	if ifMatch != "" && !etagListMatches(ifMatch, etag) {
		return errPreconditionFailed
	}
	if ifNone != "" && etagListMatches(ifNone, etag) {
		return errPreconditionFailed
	}
	if lmErr != nil {
		return nil
	}
	if v := h.get("x-amz-copy-source-if-unmodified-since"); v != "" && ifMatch == "" {
		if t, err := http.ParseTime(v); err == nil && lastMod.After(t) {
			return errPreconditionFailed
		}
	}
	if v := h.get("x-amz-copy-source-if-modified-since"); v != "" && ifNone == "" {
		if t, err := http.ParseTime(v); err == nil && !lastMod.After(t) {
			return errPreconditionFailed
		}
	}
	return nil
}

// etagListMatches reports whether a comma-separated If-Match style list names
// etag (quotes optional) or is "*".
func etagListMatches(list, etag string) bool {
	for _, v := range strings.Split(list, ",") {
		v = strings.TrimSpace(v)
		if v == "*" || store.TrimETag(v) == etag {
			return true
		}
	}
	return false
}
