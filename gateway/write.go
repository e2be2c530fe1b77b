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
	// errFenceRefused answers lease.ErrFenceRefused: a conflict, so that
	// clients do not retry it as they retry SlowDown.
	errFenceRefused = newAPIError("ObjectExistsAsDirectory", http.StatusConflict,
		"The store keeps this key as a directory (for keys under key/..., or left by them) and refuses to write it: delete those keys, or use another key.")
	// errEmptyDirectory answers lease.ErrEmptyDirectory: the store clears
	// such a directory by itself, so it is a wait, not a conflict.
	errEmptyDirectory = newAPIError("SlowDown", http.StatusServiceUnavailable,
		"The store keeps an empty directory under this key, left by keys deleted from under it, and refuses to write the key until it removes it (SeaweedFS does within a few minutes): try again then.")
	// errParentIsObject answers lease.ErrParentIsObject: a write of the
	// marker "p/" while the store holds an object "p" it would replace. A
	// conflict, so that clients do not retry it.
	errParentIsObject = newAPIError("ParentIsObject", http.StatusConflict,
		"The store holds an object at this key without its trailing '/', and writing this key would replace that object: delete it first, or use another key.")
	errLeaseLost  = newAPIError("ServiceUnavailable", http.StatusServiceUnavailable, "The gateway lost its lease on the key while writing it; the outcome is being settled. Please try again.")
	errNoSession  = newAPIError("ServiceUnavailable", http.StatusServiceUnavailable, "The gateway cannot keep its session with its database; it takes no writes until the session is back. Please try again.")
	errUnrecorded = newAPIError("InternalError", http.StatusInternalServerError, "The store accepted the write but the gateway could not record it; it will be settled. Please try again.")
)

// generationHeader tells a writer which generation its write became.
const generationHeader = "x-fencegate-generation"

// keyWrite is one keyed write as the gateway sends it: the protocol's
// request (lease.WriteRequest: the key, its kind, the client's conditions)
// and how this operation's request is readied and its success answer read.
// Every keyed write runs through keyedWrite with one of these: PutObject,
// POST object, CopyObject, CompleteMultipartUpload, DeleteObject (with and
// without versionId) and each key of DeleteObjects.
type keyWrite struct {
	lease.WriteRequest
	// prepare readies the request before its first sending (the attempt
	// header, a copy's restated metadata); an error sends nothing.
	prepare func(u *upstream, t lease.Try) *apiError
	// acknowledge reads the store's success answer: what the write left.
	acknowledge func(resp *http.Response) (lease.Landed, *apiError)
}

// keyOutcome is how a keyed write ended: the store's answer to pass on (with
// the generation it became, if any), an S3 error, or nothing more to say
// (Answered, Busy).
type keyOutcome struct {
	lease.Written
	resp *http.Response
	e    *apiError
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

// writeError is the S3 answer to how the write protocol refused or ended a
// write.
func (s *Server) writeError(r *request, key string, err error) *apiError {
	var e *apiError
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, lease.ErrConflict):
		return errConflict
	case errors.Is(err, lease.ErrBusy):
		return errSlowDown
	case errors.Is(err, lease.ErrNoSession):
		return errNoSession
	case errors.Is(err, lease.ErrReservationEnded):
		return errReservationEnded
	case errors.Is(err, lease.ErrUnsettled):
		s.deps.Log.Warn("settling the key failed", "request_id", r.id, "key", key, "err", err)
		return errSlowDown
	case errors.Is(err, store.ErrNoSuchBucket):
		return errNoSuchBucket
	case errors.Is(err, lease.ErrKeyChanged):
		return errSlowDown
	case errors.Is(err, lease.ErrFenceRefused):
		return errFenceRefused
	case errors.Is(err, lease.ErrEmptyDirectory):
		return errEmptyDirectory
	case errors.Is(err, lease.ErrParentIsObject):
		return errParentIsObject
	case errors.Is(err, lease.ErrEntryAbsent):
		return errNoSuchKey
	case errors.Is(err, lease.ErrEntryMismatch):
		return errPreconditionFailed
	case errors.Is(err, lease.ErrLeaseLost):
		return errLeaseLost
	case errors.Is(err, lease.ErrUnrecorded):
		s.deps.Log.Error("commit failed after the store acknowledged; the attempt is left unknown for settling",
			"request_id", r.id, "bucket", r.bucket, "key", key, "err", err)
		return errUnrecorded
	}
	s.deps.Log.Debug("write refused", "request_id", r.id, "key", key, "err", err)
	return errInternal
}

// writeKey runs one keyed write for the request's own key and answers the
// client with its outcome.
func (s *Server) writeKey(ctx *fasthttp.RequestCtx, r *request, u *upstream, w keyWrite) *apiError {
	w.Key = r.key
	o := s.keyedWrite(ctx, r, u, w)
	switch {
	case o.e != nil:
		return o.e
	case o.Answered:
		return nil
	}
	if o.Generation > 0 {
		ctx.Response.Header.Set(generationHeader, strconv.FormatInt(o.Generation, 10))
	}
	return s.relay(ctx, r, o.resp)
}

// keyedWrite hands one keyed write to the write protocol (lease.Write) with
// how to send it: the fence as headers, the request dying with the lease,
// the answer kept for the client. ctx is the client's request when its body
// streams upstream; nil for a DeleteObjects entry.
func (s *Server) keyedWrite(ctx *fasthttp.RequestCtx, r *request, u *upstream, w keyWrite) keyOutcome {
	req := w.WriteRequest
	req.Bucket = r.bucket
	req.Resendable = u.replayable()
	req.KeysArePaths = !s.markerKeepsObject.Load()
	if u.enc != nil {
		req.Progress = u.enc.payloadRead.Load
	}
	req.At = func(st lease.Step) { hitFailpoint(string(st)) }
	var resp *http.Response
	send := func(t lease.Try) lease.Sent {
		if t.N == 0 {
			if t.Waited && u.spooled != nil {
				s.spool.waits.Inc()
			}
			if w.prepare != nil {
				if e := w.prepare(u, t); e != nil {
					return lease.Sent{NotSent: true, Err: e}
				}
			}
			s.noteUnfenced(r.id, r.bucket, req.Key, string(req.Kind))
		} else {
			drain(resp)
			u.rewind()
		}
		if t.Fenced {
			setFence(u.req.Header, t)
		}
		stop := context.AfterFunc(t.Ctx, u.cancel) // the request dies with the lease (W2)
		defer stop()
		var e *apiError
		resp, e = s.roundTrip(ctx, r, u)
		ans := lease.Sent{BodyComplete: u.bodyComplete(), Checksum: u.sentChecksum()}
		if e != nil {
			ans.Err = e
			return ans
		}
		ans.Status = resp.StatusCode
		if resp.StatusCode >= 300 || req.Version {
			// Small, and the protocol may settle before it is relayed (a
			// refusal, a versioned delete): read it now, so the connection
			// goes back.
			keepAnswer(resp)
			if resp.StatusCode >= 300 {
				return ans
			}
		}
		var le *apiError
		if ans.Landed, le = w.acknowledge(resp); le != nil {
			ans.LandedErr = le
		}
		return ans
	}
	written, err := s.leases.Write(context.Background(), s.store, req, send)
	if err == nil && written.Unsent {
		// A delete of an absent key not sent: S3's answer to it.
		resp = &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody}
	}
	if err != nil || written.Answered {
		drain(resp)
		if err != nil {
			e := s.writeError(r, req.Key, err)
			if u.guard != nil && errors.Is(err, lease.ErrReservationEnded) {
				e = withClose(e) // the streamed body is still on the wire, unread
			}
			return keyOutcome{e: e}
		}
	}
	return keyOutcome{Written: written, resp: resp}
}

// keepAnswer reads a small store answer into memory so it can be relayed after
// the connection is given back.
func keepAnswer(resp *http.Response) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxPeekedError))
	resp.Body.Close()
	setAnswer(resp, b)
}

// setAnswer makes b the body of resp, to be relayed in place of the store's.
func setAnswer(resp *http.Response, b []byte) {
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
}

// setFence conditions the write on the state the key was settled at (W3).
func setFence(h http.Header, t lease.Try) {
	h.Del("If-Match")
	h.Del("If-None-Match")
	if brokenFence {
		return // only in the deliberately broken build the chaos campaign must catch
	}
	if name, v := t.Condition(); name != "" {
		h.Set(name, v)
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
	if r.reservationDeferred {
		// Admission could not ask the database (admit.go): ask it now,
		// the body received.
		if _, e := s.admitReservation(r, "", r.bytesIn); e != nil {
			return e
		}
	}
	e = s.writeKey(ctx, r, u, keyWrite{
		WriteRequest: lease.WriteRequest{Kind: lease.KindPut, DeclaredSize: r.bytesIn, Checksum: u.declaredChecksum,
			ClientConditional: hasClientCondition(r), OtherCondition: hasConditionBesideFence(r), Reservation: r.reservation},
		prepare: func(u *upstream, t lease.Try) *apiError {
			u.req.Header.Set(store.AttemptHeader, t.AttemptID)
			return s.bindReservation(r, u, t.ReservationBound)
		},
		acknowledge: func(resp *http.Response) (lease.Landed, *apiError) {
			return lease.Landed{ETag: store.TrimETag(resp.Header.Get("ETag")), Size: r.bytesIn}, nil
		},
	})
	if e == nil && r.reservation != "" && ctx.Response.StatusCode() < 300 {
		s.metrics.reservationsCommitted.Inc() // its generation committed the reservation
	}
	return e
}

// deleteObject: DeleteObject under the protocol, fenced with If-Match; a
// versionId makes it a versioned delete (lease.WriteRequest.Version).
func (s *Server) deleteObject(ctx *fasthttp.RequestCtx, r *request) *apiError {
	u, e := s.buildUpstream(ctx, r)
	if e != nil {
		return e
	}
	defer u.finish(r)
	return s.writeKey(ctx, r, u, keyWrite{
		WriteRequest: lease.WriteRequest{Kind: lease.KindDelete, DeclaredSize: -1, ClientConditional: r.hdr.has("if-match"),
			OtherCondition: hasConditionBesideFence(r), Version: len(ctx.QueryArgs().Peek("versionId")) > 0},
		acknowledge: deleted})
}

// deleted is a delete's acknowledged entry: the key has no bytes now.
func deleted(*http.Response) (lease.Landed, *apiError) {
	return lease.Landed{Deleted: true, Size: -1}, nil
}
