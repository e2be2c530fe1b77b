package lease

import (
	"github.com/fencegate/fencegate/store"

	"context"
	"errors"
	"time"
)

// KindReservations sweeps upload reservations (docs/RESERVATIONS.md). First
// it ends reservations past their expiry: each claimed and ended in one
// statement (reserved -> expired, its quota released, its event written),
// oldest expiry first, at most Batch, by whichever gateway claims it first
// (FOR UPDATE SKIP LOCKED). Then it cleans up after ended (expired or
// cancelled) reservations: one whose attempts may have left bytes (a write
// whose commit the ending refused, recorded later by a settle) is claimed
// (a token, a try counted before any storage I/O, oldest end first), its
// key leased and settled, the open multipart uploads bound to it aborted at
// the store (each recorded aborted, as the uploads kind records one), and
// bytes of its attempts still current at the key are deleted fenced on
// their ETag, as a delete generation; a failed store call keeps the claim
// and retries after a back-off. A committed reservation's object is never
// touched: only ended reservations are claimed, and only their own
// attempts' bytes are deleted.
const KindReservations = "reservations"

// EndedReservation is an ended reservation the sweeper cleans up after.
type EndedReservation struct {
	ID, Bucket, Key string
	Tries           int
}

// ReservationSweeper is the database side of KindReservations (meta's
// Catalog). A driver without it runs the kind as a no-op.
type ReservationSweeper interface {
	// ExpireReservations ends at most limit expired reservations and
	// reports how many it ended.
	ExpireReservations(ctx context.Context, limit int) (int, error)
	// ClaimEndedReservations marks ended reservations with no attempts done
	// with, and claims at most limit of the others.
	ClaimEndedReservations(ctx context.Context, limit int, claim Claim) ([]EndedReservation, error)
	// ReservationUploads are the open multipart uploads bound to the
	// reservation whose upload id fencegate recorded, at its key.
	ReservationUploads(ctx context.Context, id string) ([]ReservationUpload, error)
	// ReservationBytes is the ETag of bytes of the reservation's attempts
	// that are the key's current generation (ok false: none).
	ReservationBytes(ctx context.Context, id string) (etag string, ok bool, err error)
	// ReservationSwept marks the reservation done with, unless one of its
	// attempts is still leased or unknown, or an upload of it still open
	// (ErrReservationAttemptsOpen): a write of it may still land, or an
	// upload whose id is not recorded yet wait to be aborted, and the
	// sweeper must come back for it.
	ReservationSwept(ctx context.Context, id string) error
	ReservationRetry(ctx context.Context, id string, backoff time.Duration, errText string) error
}

// ReservationUpload is an open multipart upload bound to a reservation.
type ReservationUpload struct {
	AttemptID, UploadID string
}

// ErrReservationAttemptsOpen: an ended reservation still has an attempt that
// may land (leased or unknown) or an upload still open, so it is not swept
// yet.
var ErrReservationAttemptsOpen = errors.New("the reservation has attempts still open")

// errUploadCompleting: an upload bound to an ended reservation has a
// Complete try that may still land (leased or unknown), so it is not
// aborted yet; the sweep comes back after the back-off.
var errUploadCompleting = errors.New("an upload of the reservation has a Complete that may still land")

// The steps of a reservation's sweep, told to LifecycleConfig.At (the tests'
// failpoints: a gateway killed at each, another's sweeper must repair).
const (
	StepSweepClaimed   Step = "sweep-after-claim"  // claimed (a try counted), nothing settled or sent
	StepSweepAborted   Step = "sweep-after-abort"  // an upload aborted at the store, the abort not recorded
	StepSweepDeleted   Step = "sweep-after-delete" // the bytes deleted at the store, the delete generation not committed
	StepSweepCommitted Step = "sweep-after-commit" // the delete generation committed, the reservation not marked swept
)

// FencedDeleter deletes a key's object only while it is at an ETag (the
// lifecycle store).
type FencedDeleter interface {
	DeleteIfMatch(ctx context.Context, bucket, key, etag string) error
}

func (s *Service) reservationsBatch(ctx context.Context) (Counts, bool, error) {
	sw, ok := s.db.(ReservationSweeper)
	if !ok {
		return Counts{}, false, nil
	}
	var n int
	if err := s.dbDo(ctx, func(dctx context.Context) (err error) { n, err = sw.ExpireReservations(dctx, s.cfg.Batch); return }); err != nil {
		return Counts{Failed: 1}, false, err
	}
	s.Metrics.ReservationsExpired.Add(float64(n))
	c := Counts{Claimed: n, Completed: n}
	var ended []EndedReservation
	if err := s.dbDo(ctx, func(dctx context.Context) (err error) {
		ended, err = sw.ClaimEndedReservations(dctx, s.cfg.Batch, s.m.claim(s.cfg.ClaimFor))
		return
	}); err != nil {
		return c, false, err
	}
	c.Claimed += len(ended)
	for _, e := range ended {
		switch s.sweepReservation(ctx, sw, e) {
		case outcomeDone:
			c.Completed++
		case outcomeSkipped:
			c.Skipped++
		case outcomeRetry:
			c.Retried++
		default:
			c.Failed++
		}
	}
	return c, n == s.cfg.Batch || len(ended) == s.cfg.Batch, nil
}

// sweepReservation deletes what an ended reservation's attempts left at its
// key, under the key's lease, fenced.
func (s *Service) sweepReservation(ctx context.Context, sw ReservationSweeper, e EndedReservation) outcome {
	del, ok := s.store.(FencedDeleter)
	if !ok {
		return outcomeSkipped
	}
	s.at(StepSweepClaimed, e)
	l, err := s.m.Acquire(ctx, Request{Bucket: e.Bucket, Key: e.Key, Op: "delete", NoWait: true, DeclaredSize: -1})
	if errors.Is(err, ErrBusy) {
		// A writer holds the key: the claim is given back after the
		// back-off, not held for the whole of ClaimFor (a minute's wait for
		// one sweep in a chaos run; TestReservationSweepComesBackSoonAfterABusyKey).
		return s.retryReservation(ctx, sw, e, err)
	}
	if err != nil {
		return outcomeFailed
	}
	sent := false
	defer func() { l.Close(sent) }()
	fence, err := l.Settle(ctx, s.store)
	if err != nil {
		l.Fail("settling the key failed: " + err.Error())
		return s.retryReservation(ctx, sw, e, err)
	}
	if out, stop := s.abortReservationUploads(ctx, sw, e, l); stop {
		l.Fail("aborting the reservation's uploads failed")
		return out
	}
	var etag string
	if s.dbDo(ctx, func(dctx context.Context) (err error) { etag, ok, err = sw.ReservationBytes(dctx, e.ID); return }) != nil {
		l.Fail("reading the reservation's bytes failed")
		return outcomeFailed
	}
	if !ok || !fence.Exists || fence.ETag != etag {
		l.Fail("nothing of the ended reservation is at the key")
		return s.reservationSwept(ctx, sw, e)
	}
	l.Sending(fence, true)
	sent = true
	if err := del.DeleteIfMatch(ctx, e.Bucket, e.Key, etag); err != nil {
		if errors.Is(err, store.ErrPreconditionFailed) {
			l.Fail("the store refused the fence: the key changed")
		} else {
			l.Unknown("the delete got no answer: " + err.Error())
		}
		return s.retryReservation(ctx, sw, e, err)
	}
	s.Metrics.ReservationSweeps.WithLabelValues("bytes_deleted").Inc()
	s.at(StepSweepDeleted, e)
	if _, err := l.Commit(ctx, Landed{Deleted: true, Size: -1}); err != nil {
		return outcomeFailed
	}
	s.at(StepSweepCommitted, e)
	return s.reservationSwept(ctx, sw, e)
}

// abortReservationUploads aborts, under the key's lease l, the open
// multipart uploads bound to e at the store, each recorded aborted (as the
// uploads kind records an abandoned upload's abort; one the store no longer
// knows is recorded so too). It reports stop with the outcome when the
// sweep must not go on: a store failure keeps the claim for a retry after
// the back-off, as does an upload whose Complete may still land (a try
// leased or unknown), which is not aborted under it; a database failure
// lets the claim run out.
func (s *Service) abortReservationUploads(ctx context.Context, sw ReservationSweeper, e EndedReservation, l *Lease) (outcome, bool) {
	var ups []ReservationUpload
	if s.dbDo(ctx, func(dctx context.Context) (err error) { ups, err = sw.ReservationUploads(dctx, e.ID); return }) != nil {
		return outcomeFailed, true
	}
	for _, u := range ups {
		var ok bool
		if s.dbDo(ctx, func(dctx context.Context) (err error) { ok, err = s.db.UploadAbortable(dctx, u.AttemptID); return }) != nil {
			return outcomeFailed, true
		}
		if !ok {
			return s.retryReservation(ctx, sw, e, errUploadCompleting), true
		}
		// The abort dies with the lease (W2), as every store call under it.
		actx, cancel := context.WithTimeout(ctx, itemBudget)
		stop := context.AfterFunc(l.ctx, cancel)
		err := s.store.AbortMultipartUpload(actx, e.Bucket, e.Key, u.UploadID)
		stop()
		cancel()
		if err != nil && !errors.Is(err, store.ErrNoSuchUpload) {
			s.log.Warn("reservation sweep: the store failed an abort; the reservation stays claimed and is tried again",
				"reservation", e.ID, "bucket", e.Bucket, "key", e.Key, "upload_id", u.UploadID, "tries", e.Tries, "err", err)
			return s.retryReservation(ctx, sw, e, err), true
		}
		s.Metrics.ReservationSweeps.WithLabelValues("upload_aborted").Inc()
		s.at(StepSweepAborted, e)
		if s.dbDo(ctx, func(dctx context.Context) error {
			return s.db.UploadAborted(dctx, u.AttemptID, "its reservation ended: aborted by the sweeper")
		}) != nil {
			return outcomeFailed, true
		}
	}
	return outcomeDone, false
}

// reservationSwept marks e swept; while one of its attempts may still land
// (an unknown write held somewhere, its guard not yet closed by a settle),
// the claim is kept and the sweep comes back after a back-off, so late bytes
// are deleted too.
func (s *Service) reservationSwept(ctx context.Context, sw ReservationSweeper, e EndedReservation) outcome {
	err := s.dbDo(ctx, func(dctx context.Context) error { return sw.ReservationSwept(dctx, e.ID) })
	switch {
	case errors.Is(err, ErrReservationAttemptsOpen):
		return s.retryReservation(ctx, sw, e, err)
	case err != nil:
		return outcomeFailed
	}
	return outcomeDone
}

func (s *Service) retryReservation(ctx context.Context, sw ReservationSweeper, e EndedReservation, cause error) outcome {
	if s.dbDo(ctx, func(dctx context.Context) error {
		return sw.ReservationRetry(dctx, e.ID, s.backoff(e.Tries), cause.Error())
	}) != nil {
		return outcomeFailed
	}
	return outcomeRetry
}
