package lease

import (
	"context"
	"errors"
	"time"

	"github.com/fencegate/fencegate/store"
)

// uploadsBatch first binds multipart attempts whose Create left no upload id
// to the uploads their Creates made (bindBatch, unbound.go), then cleans up
// abandoned uploads (abandonedBatch).
func (s *Service) uploadsBatch(ctx context.Context, deadline time.Time) (Counts, bool, error) {
	c, fullBind, err := s.bindBatch(ctx, deadline)
	if err != nil {
		return c, false, err
	}
	a, full, err := s.abandonedBatch(ctx, deadline)
	c.add(a)
	return c, fullBind || full, err
}

// abandonedBatch claims abandoned multipart uploads fencegate created and
// aborts each that is still idle. An upload is aborted only under its key's
// lease, after checking there that it is open and none of its Complete tries
// is leased or unknown: a Complete in progress holds that lease for as long
// as its store request is outstanding, so it is never aborted under it.
func (s *Service) abandonedBatch(ctx context.Context, deadline time.Time) (Counts, bool, error) {
	var c Counts
	dctx, cancel := s.m.dbctx(ctx)
	ups, err := s.db.ClaimAbandonedUploads(dctx, s.cfg.Batch, s.cfg.UploadIdle, s.m.claim(s.cfg.ClaimFor))
	cancel()
	if err != nil {
		return c, false, err
	}
	c.Claimed = len(ups)
	for i, u := range ups {
		if ctx.Err() != nil || time.Now().After(deadline) {
			// Out of budget, or shutting down: the rest go back unclaimed,
			// their tries taken back (no storage I/O was done for them).
			for _, r := range ups[i:] {
				_ = s.dbDo(ctx, func(ctx context.Context) error { return s.db.Unclaim(ctx, r.AttemptID, true) })
				c.Skipped++
			}
			break
		}
		switch s.cleanUpload(ctx, u) {
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
	return c, len(ups) == s.cfg.Batch, nil
}

type outcome int

const (
	outcomeDone outcome = iota
	outcomeSkipped
	outcomeRetry
	outcomeFailed
)

func (s *Service) dbDo(ctx context.Context, fn func(context.Context) error) error {
	dctx, cancel := s.m.dbctx(context.WithoutCancel(ctx))
	defer cancel()
	return fn(dctx)
}

func (s *Service) retryUpload(ctx context.Context, u AbandonedUpload, err error) outcome {
	s.log.Warn("abandoned upload: store failure; it stays claimed and is tried again", "bucket", u.Bucket, "key", u.Key,
		"upload_id", u.UploadID, "tries", u.Tries, "err", err)
	if s.dbDo(ctx, func(dctx context.Context) error {
		return s.db.RetryLater(dctx, u.AttemptID, s.backoff(u.Tries), err.Error())
	}) != nil {
		return outcomeFailed
	}
	return outcomeRetry
}

func (s *Service) cleanUpload(ctx context.Context, u AbandonedUpload) outcome {
	ictx, cancel := context.WithTimeout(ctx, itemBudget)
	defer cancel()
	last, _, err := s.store.LastPart(ictx, u.Bucket, u.Key, u.UploadID)
	switch {
	case errors.Is(err, store.ErrNoSuchUpload):
		// Gone from the store: completed or aborted around the gateway. The
		// key is settled so any bytes it published are recorded.
		if err := s.m.SettleKey(ictx, u.Bucket, u.Key, s.store, false); err != nil && !errors.Is(err, ErrBusy) {
			return s.retryUpload(ctx, u, err)
		}
		if s.dbDo(ctx, func(dctx context.Context) error {
			return s.db.UploadAborted(dctx, u.AttemptID, "gone from the store (completed or aborted around the gateway)")
		}) != nil {
			return outcomeFailed
		}
		return outcomeDone
	case err != nil:
		return s.retryUpload(ctx, u, err)
	case !last.IsZero() && time.Since(last) < s.cfg.UploadIdle:
		if s.dbDo(ctx, func(dctx context.Context) error { return s.db.UploadActive(dctx, u.AttemptID, last) }) != nil {
			return outcomeFailed
		}
		return outcomeSkipped
	}
	l, err := s.m.Acquire(ictx, Request{Bucket: u.Bucket, Key: u.Key, Op: KindSettle, NoWait: true, settle: true, DeclaredSize: -1})
	if errors.Is(err, ErrBusy) {
		// A writer holds the key, perhaps this upload's Complete: leave it.
		_ = s.dbDo(ctx, func(dctx context.Context) error { return s.db.Unclaim(dctx, u.AttemptID, false) })
		return outcomeSkipped
	}
	if err != nil {
		return outcomeFailed
	}
	defer func() {
		l.stopRenewing()
		l.finish("", "")
	}()
	var ok bool
	if s.dbDo(ctx, func(dctx context.Context) (err error) { ok, err = s.db.UploadAbortable(dctx, u.AttemptID); return }) != nil {
		return outcomeFailed
	}
	if !ok {
		_ = s.dbDo(ctx, func(dctx context.Context) error { return s.db.Unclaim(dctx, u.AttemptID, false) })
		return outcomeSkipped
	}
	actx, cancel := context.WithCancel(ictx)
	defer cancel()
	go func() {
		select {
		case <-l.ctx.Done():
			cancel()
		case <-actx.Done():
		}
	}()
	if err := s.store.AbortMultipartUpload(actx, u.Bucket, u.Key, u.UploadID); err != nil && !errors.Is(err, store.ErrNoSuchUpload) {
		return s.retryUpload(ctx, u, err)
	}
	idle := "created " + u.CreatedAt.UTC().Format(time.RFC3339)
	if !last.IsZero() {
		idle = "last part " + last.UTC().Format(time.RFC3339)
	}
	if s.dbDo(ctx, func(dctx context.Context) error {
		return s.db.UploadAborted(dctx, u.AttemptID, "abandoned ("+idle+"): aborted by the reconciler")
	}) != nil {
		return outcomeFailed
	}
	return outcomeDone
}
