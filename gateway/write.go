package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/store"
)

// Errors of the write protocol, as S3 answers them.
var (
	errConflict = newAPIError("ConditionalRequestConflict", http.StatusConflict,
		"A conflicting conditional operation is currently in progress against this resource. Please try again.")
	errNoSuchBucket = newAPIError("NoSuchBucket", http.StatusNotFound, "The specified bucket does not exist.")
	errSlowDown     = newAPIError("SlowDown", http.StatusServiceUnavailable, "Please reduce your request rate.")
	errLeaseLost    = newAPIError("ServiceUnavailable", http.StatusServiceUnavailable, "The gateway lost its lease on the key while writing it; the outcome is being settled. Please try again.")
	errNoSession    = newAPIError("ServiceUnavailable", http.StatusServiceUnavailable, "The gateway cannot keep its session with its database; it takes no writes until the session is back. Please try again.")
	errUnrecorded   = newAPIError("InternalError", http.StatusInternalServerError, "The store accepted the write but the gateway could not record it; it will be settled. Please try again.")
)

// generationHeader tells a writer which generation its write became.
const generationHeader = "x-fencegate-generation"

// keyWrite is one write that publishes or removes bytes at a key, under the
// key's lease (docs/PROTOCOL.md). Every keyed write runs
// through keyedWrite with one of these: PutObject, CopyObject,
// CompleteMultipartUpload, DeleteObject (with and without versionId) and each
// key of DeleteObjects.
type keyWrite struct {
	op       string // put, copy, complete, delete
	key      string // r.key, or a DeleteObjects entry's
	declared int64
	// uploadAttempt: the multipart upload a Complete try publishes. Every try
	// is a new attempt; this names the upload it belongs to.
	uploadAttempt string
	// checksum the client declared for the body up front ("crc32:<base64>").
	checksum   string
	clientCond bool // the client sent If-Match / If-None-Match itself
	// otherCond: the client sent a precondition that goes beside the fence
	// (If-Unmodified-Since, x-amz-if-match-*): a 412 with the key as fenced
	// is the client's.
	otherCond bool
	// noWait gives up at once if the key is leased (DeleteObjects' first pass).
	noWait bool
	// entryETag: the ETag (or "*") a DeleteObjects entry is conditioned on
	// (its <ETag>). fencegate's fence carries it to the store: the write is
	// sent only while the key is at that ETag, as the store last showed it,
	// and is refused as S3 refuses the entry otherwise.
	entryETag string
	// version: the write addresses one version (a versioned delete). It
	// publishes nothing itself: it is sent unfenced under the lease, and the
	// key is settled from the store after it.
	version bool
	prepare func(u *upstream, attemptID string) *apiError
	// afterSettle may answer the request itself once the key is settled (a
	// repeated Complete whose first attempt turned out to have landed).
	afterSettle func() (done bool, e *apiError)
	acknowledge func(resp *http.Response) (lease.Landed, *apiError) // reads the store's success answer
}

// keyOutcome is how a keyed write ended: the store's answer to pass on (with
// the generation it became, if any), an S3 error, or nothing more to say.
type keyOutcome struct {
	resp     *http.Response
	gen      int64
	e        *apiError
	busy     bool // noWait, and the key was leased
	answered bool // afterSettle answered the request itself
}

func hasClientCondition(r *request) bool {
	return r.hdr.has("if-match") || r.hdr.has("if-none-match")
}

// besideFenceConditions are the client preconditions a write keeps beside
// fencegate's fence (they condition on a date or a size, not the key's
// state as the fence names it).
var besideFenceConditions = []string{"if-unmodified-since", "x-amz-if-match-last-modified-time",
	"x-amz-if-match-size", "x-amz-if-match-initiated-time"}

func hasConditionBesideFence(r *request) bool {
	for _, h := range besideFenceConditions {
		if r.hdr.has(h) {
			return true
		}
	}
	return false
}

// leaseError maps a lease refusal to its S3 answer.
func leaseError(err error) *apiError {
	switch {
	case errors.Is(err, lease.ErrConflict):
		return errConflict
	case errors.Is(err, lease.ErrBusy):
		return errSlowDown
	case errors.Is(err, lease.ErrNoSession):
		return errNoSession
	}
	return errInternal
}

// writeKey runs one keyed write for the request's own key and answers the
// client with its outcome.
func (s *Server) writeKey(ctx *fasthttp.RequestCtx, r *request, u *upstream, w keyWrite) *apiError {
	w.key = r.key
	o := s.keyedWrite(ctx, r, u, w)
	switch {
	case o.e != nil:
		return o.e
	case o.answered:
		return nil
	}
	if o.gen > 0 {
		ctx.Response.Header.Set(generationHeader, strconv.FormatInt(o.gen, 10))
	}
	return s.relay(ctx, r, o.resp)
}

// keyedWrite is the write protocol, the one copy of it: lease (W1, W2),
// settle, fenced send (W3, W4), verified commit (W5); unknown stays unknown
// (W6). ctx is the client's request when its body streams upstream; nil for a
// DeleteObjects entry.
func (s *Server) keyedWrite(ctx *fasthttp.RequestCtx, r *request, u *upstream, w keyWrite) keyOutcome {
	fail := func(e *apiError) keyOutcome { return keyOutcome{e: e} }
	l, err := s.leases.Acquire(context.Background(), lease.Request{
		Bucket: r.bucket, Key: w.key, Op: w.op, UploadAttempt: w.uploadAttempt, DeclaredSize: w.declared,
		Checksum: w.checksum, ClientConditional: w.clientCond, NoWait: w.noWait,
	})
	if err != nil {
		if w.noWait && errors.Is(err, lease.ErrBusy) {
			return keyOutcome{busy: true}
		}
		s.deps.Log.Debug("lease refused", "request_id", r.id, "key", w.key, "err", err)
		return fail(leaseError(err))
	}
	sent := false
	defer func() { l.Close(sent) }()
	if l.Waited && u.spooled != nil {
		s.spool.waits.Inc()
	}
	hitFailpoint("after-lease")

	fence, err := l.Settle(context.Background(), s.store)
	if errors.Is(err, store.ErrNoSuchBucket) {
		l.Fail("the store has no such bucket; nothing was sent")
		return fail(errNoSuchBucket)
	}
	if err != nil {
		l.Fail("settling the key failed before anything was sent: " + err.Error())
		s.deps.Log.Warn("settle failed", "request_id", r.id, "key", w.key, "err", err)
		return fail(errSlowDown)
	}
	if w.afterSettle != nil {
		if done, e := w.afterSettle(); done {
			return keyOutcome{e: e, answered: e == nil}
		}
	}
	if w.entryETag != "" && !w.version {
		if fence, err = entryFence(l, s.store, fence, w.entryETag); err != nil {
			s.deps.Log.Warn("settle for an entry's condition failed", "request_id", r.id, "key", w.key, "err", err)
			l.Fail("settling the key for the entry's condition failed: " + err.Error())
			return fail(errSlowDown)
		}
		if e := entryRefusal(fence, w.entryETag); e != nil {
			l.Fail("the key is not at the ETag the entry names; nothing was sent")
			return fail(e)
		}
	}
	ourFence := !w.clientCond && !w.version
	if ourFence {
		setFence(u.req.Header, fence, w.op)
	}
	if w.prepare != nil {
		if e := w.prepare(u, l.AttemptID); e != nil {
			l.Fail("request refused before sending: " + e.Code)
			return fail(e)
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
	if u.enc != nil {
		// Writers waiting for this key wait on while the body flows.
		l.ReportProgress(u.enc.payloadRead.Load)
	}
	s.noteUnfenced(r.id, r.bucket, w.key, w.op)
	sent = true
	var resp *http.Response
	for try := 0; ; try++ {
		l.Sending(fence, ourFence)
		var e *apiError
		resp, e = s.roundTrip(ctx, r, u)
		if c := u.sentChecksum(); c != "" {
			l.SentChecksum(c)
		}
		if e != nil {
			// Nothing can have been published if the body never completed.
			if u.bodyComplete() {
				if l.IsLost() {
					e = errLeaseLost
				}
				l.Unknown("no answer from the store: " + e.Code)
			} else {
				l.Fail("the request body never completed: " + e.Code)
			}
			return fail(e)
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
			s.deps.Log.Warn("settle after a refused fence failed", "request_id", r.id, "key", w.key, "err", err)
			l.Fail("the store refused the write; settling the key failed: " + err.Error())
			return fail(errSlowDown)
		}
		if o, done := settledAgain(l, w, resp); done {
			return o
		}
		if now == fence {
			l.Fail("the store refused the request itself: " + resp.Status)
			if resp.StatusCode == http.StatusPreconditionFailed && w.otherCond {
				// The key is as fenced: the 412 is the client's own
				// precondition beside the fence (If-Unmodified-Since, an
				// x-amz-if-match-* header), and it is the client's answer.
				return keyOutcome{resp: resp}
			}
			if resp.StatusCode == http.StatusPreconditionFailed {
				// No condition of the client's was sent, so a 412 is a condition
				// of fencegate's: the key moved and came back (an absent key
				// created and deleted around the gateway meanwhile), or a copy's
				// source changed after it was read. The client may try again.
				drain(resp)
				return fail(errSlowDown)
			}
			return keyOutcome{resp: resp}
		}
		drain(resp)
		if e := entryRefusal(now, w.entryETag); w.entryETag != "" && e != nil {
			l.Fail("the store refused fencegate's condition: the key is no longer at the ETag the entry names")
			return fail(e)
		}
		if try > 0 || !u.replayable() {
			// A streamed body was consumed by its one sending: the client tries
			// again (S3 clients retry 503), and finds the key settled.
			l.Fail("the store refused fencegate's condition: the key had changed around the gateway")
			return fail(errSlowDown)
		}
		fence = now
		setFence(u.req.Header, fence, w.op)
		u.rewind()
	}
	status := resp.StatusCode
	switch {
	case status >= 500:
		// Before the versioned case: a 5xx may have removed the version
		// (W6), whatever the write addressed.
		l.Unknown("the store answered " + resp.Status)
		return keyOutcome{resp: resp}
	case w.version:
		// Removing a version changes the key only if it was current: settle
		// again from what the store now holds.
		keepAnswer(resp)
		if _, err := l.Resettle(context.Background(), s.store); err != nil {
			s.deps.Log.Warn("settle after a versioned delete failed", "request_id", r.id, "key", w.key, "err", err)
		}
		l.Fail("a versioned delete publishes nothing itself; the key was settled after it")
		return keyOutcome{resp: resp}
	case status == http.StatusNotFound && w.afterSettle != nil:
		// A Complete the store no longer knows the upload of: an earlier try
		// may have published it since this one was settled. Settle again
		// (adopting that try if it landed) and answer as it did.
		keepAnswer(resp)
		if _, err := l.Resettle(context.Background(), s.store); err != nil {
			s.deps.Log.Warn("settle after a refused Complete failed", "request_id", r.id, "key", w.key, "err", err)
		} else if o, done := settledAgain(l, w, resp); done {
			return o
		}
		l.Fail("the store answered " + resp.Status)
		return keyOutcome{resp: resp}
	case status == http.StatusPreconditionFailed: // only ever the client's own condition here
		l.Fail("the store refused the client's condition")
		return keyOutcome{resp: resp}
	case status >= 300:
		l.Fail("the store answered " + resp.Status)
		return keyOutcome{resp: resp}
	case w.op == "delete" && !fence.Exists:
		// The key was already absent: the delete changed nothing to record.
		l.Fail("the key was already absent: nothing to publish")
		return keyOutcome{resp: resp}
	}
	entry, e := w.acknowledge(resp)
	if e != nil {
		l.Unknown("the store's success answer carried an error: " + e.Code)
		return fail(e)
	}
	hitFailpoint("after-store-ack")
	gen, err := l.Commit(context.Background(), entry)
	if err != nil {
		drain(resp)
		s.deps.Log.Error("commit failed after the store acknowledged; the attempt is left unknown for settling",
			"request_id", r.id, "bucket", r.bucket, "key", w.key, "err", err)
		if errors.Is(err, lease.ErrLeaseLost) {
			return fail(errLeaseLost)
		}
		return fail(errUnrecorded)
	}
	return keyOutcome{resp: resp, gen: gen}
}

// settledAgain runs what follows a settle (afterSettle) after a settle that
// came after the store refused the write: an earlier attempt it adopted may
// have published what this one would (a Complete's earlier try), and the
// request is then answered as that one was, not resent.
func settledAgain(l *lease.Lease, w keyWrite, refused *http.Response) (keyOutcome, bool) {
	if w.afterSettle == nil {
		return keyOutcome{}, false
	}
	done, e := w.afterSettle()
	if !done {
		return keyOutcome{}, false
	}
	drain(refused)
	l.Fail("the store refused this attempt; an earlier one had published it: " + refused.Status)
	return keyOutcome{e: e, answered: e == nil}, true
}

// entryFence is the fence for a write conditioned on etag (a DeleteObjects
// entry's <ETag>): the settled fence when it names etag, else the key's state
// from a fresh HEAD, since a fence read from the catalog may be stale (bytes
// written around the gateway) and the entry is refused only on what the
// store holds.
func entryFence(l *lease.Lease, st lease.Store, f lease.Fence, etag string) (lease.Fence, error) {
	if entryRefusal(f, etag) == nil {
		return f, nil
	}
	return l.Resettle(context.Background(), st)
}

// entryRefusal is S3's answer to a write conditioned on etag ("*": any) at a
// key in state f: nil when the key is at it, 412 PreconditionFailed when it
// is at another, 404 NoSuchKey when it is absent.
func entryRefusal(f lease.Fence, etag string) *apiError {
	switch {
	case !f.Exists:
		return errNoSuchKey
	case etag != "*" && f.ETag != etag:
		return errPreconditionFailed
	}
	return nil
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
	if brokenFence {
		return // only in the deliberately broken build the chaos campaign must catch
	}
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
		op: "put", declared: r.bytesIn, checksum: u.declaredChecksum, clientCond: hasClientCondition(r), otherCond: hasConditionBesideFence(r),
		prepare: func(u *upstream, id string) *apiError {
			u.req.Header.Set(store.AttemptHeader, id)
			return nil
		},
		acknowledge: func(resp *http.Response) (lease.Landed, *apiError) {
			return lease.Landed{ETag: store.TrimETag(resp.Header.Get("ETag")), Size: r.bytesIn}, nil
		},
	})
}

// deleteObject: DeleteObject under the protocol, fenced with If-Match; a
// versionId makes it a versioned delete (keyWrite.version).
func (s *Server) deleteObject(ctx *fasthttp.RequestCtx, r *request) *apiError {
	u, e := s.buildUpstream(ctx, r)
	if e != nil {
		return e
	}
	defer u.finish(r)
	return s.writeKey(ctx, r, u, keyWrite{op: "delete", declared: -1, clientCond: r.hdr.has("if-match"), otherCond: hasConditionBesideFence(r),
		version: len(ctx.QueryArgs().Peek("versionId")) > 0, acknowledge: deleted})
}

// deleted is a delete's acknowledged entry: the key has no bytes now.
func deleted(*http.Response) (lease.Landed, *apiError) {
	return lease.Landed{Deleted: true, Size: -1}, nil
}
