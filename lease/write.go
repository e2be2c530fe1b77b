package lease

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/fencegate/fencegate/store"
)

// The write protocol, its one copy: Write takes the key's lease (W1, W2),
// settles the key, sends under the fence (W3, W4) through the caller's send,
// classifies the store's answer, and commits what the store acknowledged
// (W5), fails what it proved unwritten, or keeps an unknown outcome as a
// guard (W6); then releases the key or hands it to the next writer. The
// gateway supplies only how to send bytes (Send) and renders what Write
// returns. docs/PROTOCOL.md tells the steps; docs/DESIGN.md argues them.

// Kind is what a write does at its key; its value is the op an attempt
// records (attempts.op).
type Kind string

const (
	KindPut      Kind = "put"
	KindCopy     Kind = "copy"
	KindComplete Kind = "complete" // CompleteMultipartUpload: publishes an upload
	KindDelete   Kind = "delete"
	// KindMultipart is a CreateMultipartUpload's attempt: it publishes
	// nothing and takes no lease; Complete publishes its upload.
	KindMultipart Kind = "multipart"
	// KindSettle is a settler's lease (the reconciler): no attempt.
	KindSettle Kind = "settle"
)

// WriteRequest is one keyed write: PutObject, CopyObject,
// CompleteMultipartUpload, DeleteObject (with or without a version) or one
// key of DeleteObjects.
type WriteRequest struct {
	Bucket, Key string
	Kind        Kind
	// UploadAttempt is the multipart upload a Complete try publishes (its
	// attempt id). Every try is a new attempt.
	UploadAttempt string
	DeclaredSize  int64 // -1: not known
	// Checksum the client declared for the body up front ("crc32:<base64>").
	Checksum string
	// ClientConditional: the client sent If-Match / If-None-Match itself; its
	// condition goes to the store instead of fencegate's fence, and a leased
	// key is a conflict, not a wait.
	ClientConditional bool
	// OtherCondition: the client sent a precondition that goes beside the
	// fence (If-Unmodified-Since, x-amz-if-match-*): a 412 at the key as
	// fenced is the client's answer.
	OtherCondition bool
	// NoWait gives up at once if the key is leased (DeleteObjects' first
	// pass): Write answers Written.Busy.
	NoWait bool
	// EntryETag is the ETag (or "*") a DeleteObjects entry is conditioned on:
	// the write is sent only while the key is at it, as the store last showed
	// it, and refused as S3 refuses the entry otherwise.
	EntryETag string
	// Version: the write addresses one version (a versioned delete). It
	// publishes nothing itself: it is sent unfenced under the lease, and the
	// key is settled from the store after it.
	Version bool
	// Resendable: the body is held whole and can be sent again, so a fence
	// the store refused because the key changed around the gateway is tried
	// once more on the key as it now is. A streamed body is not.
	Resendable bool
	// KeysArePaths: the store keeps keys as file paths (SeaweedFS; the
	// start-up probe tells), so a write may change another key than its
	// own, or be refused for one. Then a write of the marker "p/" is refused
	// while an object "p" exists (ErrParentIsObject: it would replace it),
	// a delete of an absent key is not sent while a marker "key/" exists
	// (Written.Unsent: it would delete it), and a write that cannot be sent
	// again lists the keys under the key to tell the store's directory
	// refusal (ErrFenceRefused) from a key that changed; on other stores it
	// is the latter.
	KeysArePaths bool
	// Progress counts the body's bytes so far (nil: not counted): while it
	// grows, writers waiting for the key wait on.
	Progress func() int64
	// Settled runs after each settle of the key: it may answer the request
	// itself (answered) or refuse it (err) with nothing sent, as a repeated
	// Complete whose earlier try published the upload is answered.
	Settled func() (answered bool, err error)
	// At is told each step of the protocol as it is reached (the tests'
	// failpoints); nil: nobody listens.
	At func(Step)
	// Reservation the write is made under (docs/RESERVATIONS.md): its
	// acquire binds the attempt to it, or Write returns ErrReservationEnded
	// with nothing sent.
	Reservation string
}

// Step names a point of the write protocol.
type Step string

const (
	StepLeased Step = "after-lease"     // the lease is held, nothing settled or sent
	StepAcked  Step = "after-store-ack" // the store acknowledged, nothing committed
)

// Try is one sending of the write.
type Try struct {
	// Ctx is cancelled when the lease is lost: the request must die with it
	// (W2).
	Ctx       context.Context
	AttemptID string
	// Fence is the key's state as settled; Fenced says whether fencegate's
	// condition on it goes with the request (not when the client sent its
	// own, nor for a versioned delete).
	Fence  Fence
	Fenced bool
	Kind   Kind
	// N counts the sendings: 0 the first; 1 the one resend after the store
	// refused a fence because the key changed around the gateway.
	N int
	// Waited: the key was leased when the write came, and it waited.
	Waited bool
	// ReservationBound: the acquire bound WriteRequest.Reservation to the
	// attempt; false with a reservation: the sender binds it (a lease
	// handed over by a commit binds nothing).
	ReservationBound bool
}

// Condition is the header the try's fence puts on the request: If-Match on
// the ETag the key was settled at, If-None-Match: * on an absent key, none
// for a delete of an absent key (it changes nothing) or an unfenced try.
func (t Try) Condition() (header, value string) {
	switch {
	case !t.Fenced:
		return "", ""
	case t.Fence.Exists:
		return "If-Match", `"` + t.Fence.ETag + `"`
	case t.Kind != KindDelete:
		return "If-None-Match", "*"
	}
	return "", ""
}

// Sent is the store's answer to one try, as the sender read it.
type Sent struct {
	// NotSent: the sender refused the request before any byte went out;
	// Err says why, and Write returns it.
	NotSent bool
	// Err: no answer came (a transport error, a timeout, a cut body); Write
	// returns it (ErrLeaseLost instead when the lease was lost).
	Err error
	// BodyComplete: the whole body reached the store's connection. An error
	// with the body incomplete proves nothing was published.
	BodyComplete bool
	Status       int    // the answer's HTTP status
	Checksum     string // the body's checksum as sent ("crc32:<base64>"), "" if none
	// Landed is what a 2xx answer says the write left at the key;
	// LandedErr, that the success answer carried an error (S3's 200 with an
	// <Error> body): the outcome is unknown.
	Landed    Landed
	LandedErr error
}

// Written is how a write ended when Write returns no error.
type Written struct {
	// Generation: the write became this generation of the key (0: it
	// published nothing, and the store's answer is the client's).
	Generation int64
	// Answered: Settled answered the request itself; nothing was sent.
	Answered bool
	// Busy: NoWait, and the key was leased; nothing was done.
	Busy bool
	// Unsent: a delete of a key absent at the store was not sent, because
	// the store keeps a directory under the key's name that it would have
	// deleted (WriteRequest.KeysArePaths); S3's answer to a delete of an
	// absent key (204) is the client's.
	Unsent bool
}

// Errors Write returns besides the lease's own (ErrConflict, ErrBusy,
// ErrNoSession, ErrLeaseLost), store.ErrNoSuchBucket, and what Settled and
// the sender return.
var (
	// ErrUnsettled: settling the key failed; nothing was sent.
	ErrUnsettled = errors.New("settling the key failed")
	// ErrKeyChanged: the store refused fencegate's condition because the key
	// changed around the gateway (or moved and came back) and the write
	// cannot be sent again; nothing was written. The client may try again.
	ErrKeyChanged = errors.New("the key changed around the gateway")
	// ErrFenceRefused: the store refused a write's condition while its HEAD
	// showed the key just as the condition named it, twice for a PUT it
	// could send again, once for any other write when the store lists keys
	// under "key/": the store holds something there that only its
	// condition sees (SeaweedFS keeps the keys under "key/" as a directory,
	// which refuses If-None-Match on "key" and If-Match on "key/"). Nothing
	// was written; trying again would meet the same refusal.
	ErrFenceRefused = errors.New("the store refuses fencegate's condition on the key, though a HEAD finds the key as the condition names it")
	// ErrEmptyDirectory: as ErrFenceRefused, but no key is left under
	// "key/": the store keeps the empty directory they left and refuses
	// fencegate's conditions on it until it removes it (SeaweedFS does by
	// itself, about 2.5 minutes after the last key under it was deleted).
	// Nothing was written; the client may try again later.
	ErrEmptyDirectory = errors.New("the store keeps an empty directory at the key, left by keys deleted from under it, and refuses fencegate's condition on it")
	// ErrParentIsObject: a write of the marker "p/" was not sent because the
	// store holds an object "p" that it would replace (KeysArePaths).
	ErrParentIsObject = errors.New("the store holds an object that the marker's write would replace")
	// ErrEntryAbsent and ErrEntryMismatch: the key is absent, or at
	// another ETag than EntryETag names (S3's NoSuchKey and
	// PreconditionFailed for the entry); nothing was sent.
	ErrEntryAbsent   = errors.New("the key the entry names is absent")
	ErrEntryMismatch = errors.New("the key is not at the ETag the entry names")
	// ErrUnrecorded: the store acknowledged the write and recording it
	// failed; the attempt is left unknown for settling.
	ErrUnrecorded = errors.New("the store accepted the write but it could not be recorded")
)

// Write runs one keyed write through the protocol; st is the store the key is
// settled from, send sends one try and reports the answer.
func (m *Manager) Write(ctx context.Context, st Store, req WriteRequest, send func(Try) Sent) (Written, error) {
	at := func(s Step) {
		if req.At != nil {
			req.At(s)
		}
	}
	l, err := m.Acquire(ctx, Request{
		Bucket: req.Bucket, Key: req.Key, Op: req.Kind, UploadAttempt: req.UploadAttempt,
		DeclaredSize: req.DeclaredSize, Checksum: req.Checksum,
		ClientConditional: req.ClientConditional, NoWait: req.NoWait, Reservation: req.Reservation,
	})
	if err != nil {
		if req.NoWait && errors.Is(err, ErrBusy) {
			return Written{Busy: true}, nil
		}
		return Written{}, err
	}
	w := &write{l: l, st: st, req: req}
	defer func() { l.Close(w.sent) }()
	at(StepLeased)
	return w.run(ctx, send, at)
}

// write is one Write under its lease.
type write struct {
	l    *Lease
	st   Store
	req  WriteRequest
	sent bool // a byte may have reached the store
}

func (w *write) run(ctx context.Context, send func(Try) Sent, at func(Step)) (Written, error) {
	l, req := w.l, w.req
	fence, err := l.Settle(ctx, w.st)
	if err != nil {
		return w.failSettle(err, "before anything was sent")
	}
	if req.Settled != nil {
		if answered, err := req.Settled(); answered || err != nil {
			return Written{Answered: answered && err == nil}, err
		}
	}
	if req.EntryETag != "" && !req.Version {
		if entryRefusal(fence, req.EntryETag) != nil {
			// The catalog may be stale (bytes written around the gateway):
			// the entry is refused only on what the store holds.
			if fence, err = l.Resettle(ctx, w.st); err != nil {
				return w.failSettle(err, "for the entry's condition")
			}
		}
		if err := entryRefusal(fence, req.EntryETag); err != nil {
			l.Fail("the key is not at the ETag the entry names; nothing was sent")
			return Written{}, err
		}
	}
	fenced := !req.ClientConditional && !req.Version
	if req.KeysArePaths {
		var out Written
		var done bool
		if fence, out, done, err = w.pathChecks(ctx, fence, fenced); done {
			return out, err
		}
	}
	if req.Progress != nil {
		// Writers waiting for this key wait on while the body flows.
		l.ReportProgress(req.Progress)
	}
	var ans Sent
	for try := 0; ; try++ {
		l.Sending(fence, fenced)
		w.sent = true
		ans = send(Try{Ctx: l.Context(), AttemptID: l.AttemptID, Fence: fence, Fenced: fenced, Kind: req.Kind, N: try, Waited: l.Waited,
			ReservationBound: l.ReservationBound})
		if ans.Checksum != "" {
			l.SentChecksum(ans.Checksum)
		}
		switch {
		case ans.NotSent:
			w.sent = false
			l.notSent()
			l.Fail(fmt.Sprintf("request refused before sending: %v", ans.Err))
			return Written{}, ans.Err
		case ans.Err != nil && ans.BodyComplete:
			l.Unknown(fmt.Sprintf("no answer from the store: %v", ans.Err))
			if l.IsLost() {
				return Written{}, ErrLeaseLost
			}
			return Written{}, ans.Err
		case ans.Err != nil:
			// Nothing can have been published if the body never completed.
			l.Fail(fmt.Sprintf("the request body never completed: %v", ans.Err))
			return Written{}, ans.Err
		}
		if !fenced || !fenceRefusal(ans.Status, fence) {
			break
		}
		// The store refused: fencegate's fence, or the request itself (a
		// missing upload or copy source answers 404 too). Nothing was
		// written either way. Only a fresh HEAD tells which, and it brings
		// the catalog up to what the store holds (a write around the gateway
		// becomes an external generation).
		now, err := l.Resettle(ctx, w.st)
		if err != nil {
			l.Fail("the store refused the write; settling the key failed: " + err.Error())
			return Written{}, fmt.Errorf("%w: %w", ErrUnsettled, err)
		}
		if o, done, err := w.settledAgain(ans); done {
			return o, err
		}
		if now == fence {
			if ans.Status == http.StatusPreconditionFailed && !req.OtherCondition {
				// No condition of the client's was sent, so a 412 is a
				// condition of fencegate's: the key moved and came back (an
				// absent key created and deleted around the gateway
				// meanwhile), or a copy's source changed after it was read.
				// A PUT is sent once more when its body can be: a second
				// refusal, the key still as fenced to a HEAD, is the
				// store's own (ErrFenceRefused), which no retry of the
				// client's would get past. On a store that keeps keys as
				// file paths its directory at the key is that refusal
				// (paths.go), told before anything is sent again.
				var refusal error
				if req.KeysArePaths && req.Kind != KindDelete {
					refusal = w.directoryRefusal(ctx)
				}
				if refusal == nil && req.Kind == KindPut && req.Resendable && try == 0 {
					continue
				}
				l.Fail(fmt.Sprintf("the store refused fencegate's condition, and the key is as it was fenced: %d %s",
					ans.Status, http.StatusText(ans.Status)))
				switch {
				case refusal != nil:
					return Written{}, refusal
				case req.Kind == KindPut && try > 0:
					return Written{}, ErrFenceRefused
				}
				return Written{}, ErrKeyChanged
			}
			l.Fail(fmt.Sprintf("the store refused the request itself: %d %s", ans.Status, http.StatusText(ans.Status)))
			// The store's refusal (or, the key as fenced, the client's own
			// precondition beside the fence) is the client's answer.
			return Written{}, nil
		}
		if req.EntryETag != "" {
			if err := entryRefusal(now, req.EntryETag); err != nil {
				l.Fail("the store refused fencegate's condition: the key is no longer at the ETag the entry names")
				return Written{}, err
			}
		}
		if try > 0 || !req.Resendable {
			// A streamed body was consumed by its one sending: the client
			// tries again (S3 clients retry 503), and finds the key settled.
			l.Fail("the store refused fencegate's condition: the key had changed around the gateway")
			return Written{}, ErrKeyChanged
		}
		fence = now
	}
	return w.answered(ctx, ans, fence, at)
}

// answered ends a write the store answered (not a refused fence).
func (w *write) answered(ctx context.Context, ans Sent, fence Fence, at func(Step)) (Written, error) {
	l, req := w.l, w.req
	status := fmt.Sprintf("the store answered %d %s", ans.Status, http.StatusText(ans.Status))
	switch {
	case ans.Status >= 500:
		// Before the versioned case: a 5xx may have removed the version
		// (W6), whatever the write addressed.
		l.Unknown(status)
		return Written{}, nil
	case req.Version:
		// Removing a version changes the key only if it was current: settle
		// again from what the store now holds. The answer is the client's
		// whatever the settle finds.
		_, _ = l.Resettle(ctx, w.st)
		l.Fail("a versioned delete publishes nothing itself; the key was settled after it")
		return Written{}, nil
	case ans.Status == http.StatusNotFound && req.Settled != nil:
		// A Complete the store no longer knows the upload of: an earlier try
		// may have published it since this one was settled. Settle again
		// (adopting that try if it landed) and answer as it did.
		if _, err := l.Resettle(ctx, w.st); err == nil {
			if earlier, done, err := w.settledAgain(ans); done {
				return earlier, err
			}
		}
		l.Fail(status)
		return Written{}, nil
	case ans.Status == http.StatusPreconditionFailed: // only ever the client's own condition here
		l.Fail("the store refused the client's condition")
		return Written{}, nil
	case ans.Status >= 300:
		l.Fail(status)
		return Written{}, nil
	case req.Kind == KindDelete && !fence.Exists:
		l.Fail("the key was already absent: nothing to publish")
		return Written{}, nil
	case ans.LandedErr != nil:
		l.Unknown(fmt.Sprintf("the store's success answer carried an error: %v", ans.LandedErr))
		return Written{}, ans.LandedErr
	}
	at(StepAcked)
	gen, err := l.Commit(ctx, ans.Landed)
	switch {
	case errors.Is(err, ErrLeaseLost):
		return Written{}, ErrLeaseLost
	case err != nil:
		return Written{}, fmt.Errorf("%w: %w", ErrUnrecorded, err)
	}
	return Written{Generation: gen}, nil
}

// failSettle ends a write whose settle failed with nothing sent.
func (w *write) failSettle(err error, when string) (Written, error) {
	w.l.Fail("settling the key failed " + when + ": " + err.Error())
	if errors.Is(err, store.ErrNoSuchBucket) {
		return Written{}, err
	}
	return Written{}, fmt.Errorf("%w: %w", ErrUnsettled, err)
}

// settledAgain runs Settled after a settle that came after the store
// refused the write: an earlier attempt it adopted may have published what
// this one would (a Complete's earlier try), and the request is then
// answered as that one was, not resent.
func (w *write) settledAgain(refused Sent) (Written, bool, error) {
	if w.req.Settled == nil {
		return Written{}, false, nil
	}
	answered, err := w.req.Settled()
	if !answered && err == nil {
		return Written{}, false, nil
	}
	w.l.Fail(fmt.Sprintf("the store refused this attempt (%d); an earlier one had published it", refused.Status))
	return Written{Answered: answered && err == nil}, true, err
}

// entryRefusal is S3's answer to a write conditioned on etag ("*": any) at a
// key in state f: nil when the key is at it.
func entryRefusal(f Fence, etag string) error {
	switch {
	case !f.Exists:
		return ErrEntryAbsent
	case etag != "*" && f.ETag != etag:
		return ErrEntryMismatch
	}
	return nil
}

// fenceRefusal reports an answer that may be the store refusing fencegate's
// fence: 412, or 404 to an If-Match (some stores answer an If-Match on an
// absent key so).
func fenceRefusal(status int, f Fence) bool {
	return status == http.StatusPreconditionFailed || status == http.StatusNotFound && f.Exists
}
