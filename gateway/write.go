package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/internal/failpoint"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// Errors of the write protocol, as S3 answers them.
var (
	errConflict = newAPIError("ConditionalRequestConflict", http.StatusConflict,
		"A conflicting conditional operation is currently in progress against this resource. Please try again.")
	errSlowDown   = newAPIError("SlowDown", http.StatusServiceUnavailable, "Please reduce your request rate.")
	errLeaseLost  = newAPIError("ServiceUnavailable", http.StatusServiceUnavailable, "The gateway lost its lease on the key while writing it; the outcome is being settled. Please try again.")
	errUnrecorded = newAPIError("InternalError", http.StatusInternalServerError, "The store accepted the write but the gateway could not record it; it will be settled. Please try again.")
)

// generationHeader tells a writer which generation its write became.
const generationHeader = "x-fencegate-generation"

// keyWrite is one write that publishes or removes bytes at a key, under the
// key's lease (DESIGN.md, the write protocol).
type keyWrite struct {
	op        string // put, copy, complete, delete
	declared  int64
	attemptID string // an existing attempt (a multipart upload's)
	// mayHaveLanded: that attempt's earlier try has an unknown outcome.
	mayHaveLanded bool
	clientCond    bool // the client sent If-Match / If-None-Match itself
	// pinnedSource: fencegate conditioned a copy on the source version it read
	// (x-amz-copy-source-if-match), so a 412 that is not the fence means the
	// source changed meanwhile: the client, who asked for no condition, may
	// simply try again.
	pinnedSource bool
	prepare      func(u *upstream, attemptID string) *apiError
	// afterSettle may answer the request itself once the key is settled (a
	// repeated Complete whose first attempt turned out to have landed).
	afterSettle func() (done bool, e *apiError)
	acknowledge func(resp *http.Response) (meta.Entry, *apiError) // reads the store's success answer
}

func hasClientCondition(r *request) bool {
	return r.hdr.has("if-match") || r.hdr.has("if-none-match")
}

// leaseError maps a lease refusal to its S3 answer.
func leaseError(err error) *apiError {
	switch {
	case errors.Is(err, lease.ErrConflict):
		return errConflict
	case errors.Is(err, lease.ErrBusy):
		return errSlowDown
	}
	return errInternal
}

// writeKey runs one keyed write: lease, settle, fenced send, verified commit.
func (s *Server) writeKey(ctx *fasthttp.RequestCtx, r *request, u *upstream, w keyWrite) *apiError {
	l, err := s.leases.Acquire(context.Background(), lease.Request{
		Bucket: r.bucket, Key: r.key, Op: w.op, AttemptID: w.attemptID, DeclaredSize: w.declared,
		ClientConditional: w.clientCond, MayHaveLanded: w.mayHaveLanded,
	})
	if err != nil {
		s.deps.Log.Debug("lease refused", "request_id", r.id, "err", err)
		return leaseError(err)
	}
	sent := false
	defer func() { l.Close(sent) }()
	failpoint.Hit("after-lease")

	fence, err := l.Settle(context.Background(), s.store)
	if err != nil {
		l.Finish(meta.StateFailed, "settling the key failed before anything was sent: "+err.Error())
		s.deps.Log.Warn("settle failed", "request_id", r.id, "err", err)
		return errSlowDown
	}
	if w.afterSettle != nil {
		if done, e := w.afterSettle(); done {
			return e
		}
	}
	ourFence := !w.clientCond
	if ourFence {
		setFence(u.req.Header, fence, w.op)
	}
	if w.prepare != nil {
		if e := w.prepare(u, l.AttemptID); e != nil {
			l.Finish(meta.StateFailed, "request refused before sending: "+e.Code)
			return e
		}
	}

	// The upstream request dies with the lease (W2).
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go func() {
		select {
		case <-l.Lost():
			u.cancel()
		case <-stopWatch:
		}
	}()
	s.noteUnfenced(r.id, r.bucket, r.key, w.op)
	sent = true
	var resp *http.Response
	for try := 0; ; try++ {
		var e *apiError
		resp, e = s.roundTrip(ctx, r, u)
		if e != nil {
			// Nothing can have been published if the body never completed.
			if u.bodyComplete() {
				if l.IsLost() {
					e = errLeaseLost
				}
				l.Finish(meta.StateUnknown, "no answer from the store: "+e.Code)
			} else {
				l.Finish(meta.StateFailed, "the request body never completed: "+e.Code)
			}
			return e
		}
		if !ourFence || !fenceRefusal(resp.StatusCode, fence) {
			break
		}
		// The store refused: fencegate's fence, or the request itself (a missing
		// upload or copy source answers 404 too). Nothing was written either way.
		// Only a fresh HEAD tells which, and it brings the catalog up to what the
		// store holds (a write around the gateway becomes an external generation).
		keepAnswer(resp)
		now, err := l.Resettle(context.Background(), s.store)
		if err != nil {
			drain(resp)
			s.deps.Log.Warn("settle after a refused fence failed", "request_id", r.id, "err", err)
			l.Finish(meta.StateFailed, "the store refused the write; settling the key failed: "+err.Error())
			return errSlowDown
		}
		if now == fence {
			l.Finish(meta.StateFailed, "the store refused the request itself: "+resp.Status)
			if w.pinnedSource && resp.StatusCode == http.StatusPreconditionFailed {
				drain(resp)
				return errSlowDown
			}
			return s.relay(ctx, r, resp)
		}
		drain(resp)
		if try > 0 || !u.replayable() {
			// A streamed body was consumed by its one sending: the client tries
			// again (S3 clients retry 503), and finds the key settled.
			l.Finish(meta.StateFailed, "the store refused fencegate's condition: the key had changed around the gateway")
			return errSlowDown
		}
		fence = now
		setFence(u.req.Header, fence, w.op)
		u.rewind()
	}
	status := resp.StatusCode
	if status == http.StatusPreconditionFailed { // only ever the client's own condition here
		l.Finish(meta.StateFailed, "the store refused the client's condition")
		return s.relay(ctx, r, resp)
	}
	if status >= 500 {
		l.Finish(meta.StateUnknown, "the store answered "+resp.Status)
		return s.relay(ctx, r, resp)
	}
	if status >= 300 {
		l.Finish(meta.StateFailed, "the store answered "+resp.Status)
		return s.relay(ctx, r, resp)
	}
	if w.op == "delete" && !fence.Exists {
		// The key was already absent: the delete changed nothing to record.
		l.Finish(meta.StateFailed, "the key was already absent: nothing to publish")
		return s.relay(ctx, r, resp)
	}
	entry, e := w.acknowledge(resp)
	if e != nil {
		l.Finish(meta.StateUnknown, "the store's success answer carried an error: "+e.Code)
		return e
	}
	failpoint.Hit("after-store-ack")
	gen, err := l.Commit(context.Background(), entry)
	if err != nil {
		drain(resp)
		s.deps.Log.Error("commit failed after the store acknowledged; the attempt is left unknown for settling",
			"request_id", r.id, "bucket", r.bucket, "key", r.key, "err", err)
		if errors.Is(err, meta.ErrLeaseLost) {
			return errLeaseLost
		}
		return errUnrecorded
	}
	ctx.Response.Header.Set(generationHeader, strconv.FormatInt(gen, 10))
	return s.relay(ctx, r, resp)
}

// fenceRefusal reports an answer that may be the store refusing fencegate's
// fence: 412, or 404 to an If-Match (some stores answer an If-Match on an
// absent key so).
func fenceRefusal(status int, f lease.Fence) bool {
	return status == http.StatusPreconditionFailed || status == http.StatusNotFound && f.Exists
}

// keepAnswer reads a small store answer into memory so it can be relayed after
// the connection is given back.
func keepAnswer(resp *http.Response) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxPeekedError))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
}

// setFence conditions the write on the state the key was settled at (W3).
func setFence(h http.Header, f lease.Fence, op string) {
	h.Del("If-Match")
	h.Del("If-None-Match")
	if f.Exists {
		h.Set("If-Match", `"`+f.ETag+`"`)
		return
	}
	if op != "delete" { // deleting an absent key changes nothing
		h.Set("If-None-Match", "*")
	}
}

func drain(resp *http.Response) {
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
}

// putObject: PutObject under the protocol.
func (s *Server) putObject(ctx *fasthttp.RequestCtx, r *request) *apiError {
	u, e := s.buildUpstream(ctx, r)
	if e != nil {
		return e
	}
	defer u.finish(r)
	return s.writeKey(ctx, r, u, keyWrite{
		op: "put", declared: r.bytesIn, clientCond: hasClientCondition(r),
		prepare: func(u *upstream, id string) *apiError {
			u.req.Header.Set(attemptHeader, id)
			return nil
		},
		acknowledge: func(resp *http.Response) (meta.Entry, *apiError) {
			return meta.Entry{ETag: trimETag(resp.Header.Get("ETag")), Size: r.bytesIn}, nil
		},
	})
}

// deleteObject: DeleteObject under the protocol, fenced with If-Match.
func (s *Server) deleteObject(ctx *fasthttp.RequestCtx, r *request) *apiError {
	if len(ctx.QueryArgs().Peek("versionId")) > 0 {
		return s.versionedDelete(ctx, r)
	}
	u, e := s.buildUpstream(ctx, r)
	if e != nil {
		return e
	}
	defer u.finish(r)
	return s.writeKey(ctx, r, u, keyWrite{
		op: "delete", declared: -1, clientCond: r.hdr.has("if-match"),
		acknowledge: func(*http.Response) (meta.Entry, *apiError) {
			return meta.Entry{Deleted: true, Size: -1}, nil
		},
	})
}

// versionedDelete removes one version: it changes what the key resolves to only
// if that version was current, so it runs under the lease unfenced and the key
// is settled again afterwards.
func (s *Server) versionedDelete(ctx *fasthttp.RequestCtx, r *request) *apiError {
	l, err := s.leases.Acquire(context.Background(), lease.Request{Bucket: r.bucket, Key: r.key, Op: "delete", DeclaredSize: -1})
	if err != nil {
		return leaseError(err)
	}
	defer l.Close(true)
	e := s.forward(ctx, r)
	if _, err := l.Resettle(context.Background(), s.store); err != nil {
		s.deps.Log.Warn("settle after a versioned delete failed", "request_id", r.id, "err", err)
	}
	l.Finish(meta.StateFailed, "a versioned delete publishes nothing itself; the key was settled after it")
	return e
}

// bucketChanged keeps the catalog's view of buckets: one created through
// fencegate is complete (every key in it is known); a deleted one is forgotten.
func (s *Server) bucketChanged(r *request, status int) {
	if s.leases == nil || status/100 != 2 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.leases.Config().DBTimeout)
	defer cancel()
	var err error
	switch r.op.Name {
	case "CreateBucket":
		err = s.deps.Tracker.BucketCreated(ctx, r.bucket)
	case "DeleteBucket":
		err = s.deps.Tracker.BucketDeleted(ctx, r.bucket)
	}
	if err != nil {
		s.deps.Log.Warn("could not record a bucket change", "bucket", r.bucket, "err", err)
	}
}
