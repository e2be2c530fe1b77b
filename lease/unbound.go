package lease

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/fencegate/fencegate/store"
)

// CreateSlack widens a Create's window (its attempt's row written before the
// request, to its outcome recorded after it) on both sides when an upload's
// Initiated time is compared with it: the store's clock is not PostgreSQL's,
// and SeaweedFS's Initiated has whole seconds (truncated: up to a second
// early).
const CreateSlack = 5 * time.Second

// mayHaveCreated reports whether an upload initiated at `at` can be the one
// a's Create made.
func mayHaveCreated(a UploadWithoutID, at time.Time) bool {
	return !at.IsZero() && !at.Before(a.CreatedAt.Add(-CreateSlack)) && !at.After(a.WindowEnd.Add(CreateSlack))
}

// bindBatch claims multipart attempts whose Create left no upload id (its
// answer lost, or its id not recorded) once older than UploadCreateSettle,
// and binds each to the upload its Create made: one at its key, initiated
// within its Create's window, that no attempt names. A bound attempt is an
// open upload like any other, for the abandoned-upload clean-up; one with
// no such upload UploadCreateGiveUp after its Create is marked failed.
// Nothing is aborted or deleted here. Attempts of one key are bound
// together, one upload each.
func (s *Service) bindBatch(ctx context.Context, deadline time.Time) (Counts, bool, error) {
	var c Counts
	dctx, cancel := s.m.dbctx(ctx)
	atts, err := s.db.ClaimUnboundUploads(dctx, s.cfg.Batch, s.cfg.UploadCreateSettle, s.m.claim(s.cfg.ClaimFor))
	cancel()
	if err != nil {
		return c, false, err
	}
	c.Claimed = len(atts)
	var keys [][]UploadWithoutID
	at := map[[2]string]int{}
	for _, a := range atts {
		k := [2]string{a.Bucket, a.Key}
		i, ok := at[k]
		if !ok {
			i = len(keys)
			at[k] = i
			keys = append(keys, nil)
		}
		keys[i] = append(keys[i], a)
	}
	for i, group := range keys {
		if ctx.Err() != nil || time.Now().After(deadline) {
			// Out of budget, or shutting down: the rest go back unclaimed,
			// their tries taken back (no storage I/O was done for them).
			for _, rest := range keys[i:] {
				for _, a := range rest {
					_ = s.dbDo(ctx, func(ctx context.Context) error { return s.db.Unclaim(ctx, a.AttemptID, true) })
					c.Skipped++
				}
			}
			break
		}
		c.add(s.bindKey(ctx, group))
	}
	return c, len(atts) == s.cfg.Batch, nil
}

// bindKey binds one key's claimed attempts to the uploads the store has at
// the key. Of the uploads no attempt names, each attempt (the one whose
// window ends first first) takes the earliest initiated within its window:
// the greedy order that binds as many attempts as the windows allow, and,
// for attempts of one key made one after another, the oldest attempt the
// oldest upload.
func (s *Service) bindKey(ctx context.Context, atts []UploadWithoutID) Counts {
	var c Counts
	ictx, cancel := context.WithTimeout(ctx, itemBudget)
	defer cancel()
	bucket, key := atts[0].Bucket, atts[0].Key
	ups, err := s.store.KeyUploads(ictx, bucket, key)
	if err != nil {
		s.log.Warn("unrecorded multipart upload: store failure listing its key's uploads; it stays claimed and is tried again",
			"bucket", bucket, "key", key, "err", err)
		for _, a := range atts {
			if s.dbDo(ctx, func(dctx context.Context) error {
				return s.db.RetryLater(dctx, a.AttemptID, s.backoff(a.Tries), err.Error())
			}) != nil {
				c.Failed++
			} else {
				c.Retried++
			}
		}
		return c
	}
	ids := make([]string, len(ups))
	for i, u := range ups {
		ids[i] = u.UploadID
	}
	var bound map[string]bool
	if s.dbDo(ctx, func(dctx context.Context) (err error) { bound, err = s.db.BoundUploads(dctx, ids); return }) != nil {
		c.Failed += len(atts) // the claims run out; tried again later
		return c
	}
	var free []store.Upload
	for _, u := range ups {
		if !bound[u.UploadID] && u.Key == key {
			free = append(free, u)
		}
	}
	sort.SliceStable(free, func(i, j int) bool {
		if !free[i].Initiated.Equal(free[j].Initiated) {
			return free[i].Initiated.Before(free[j].Initiated)
		}
		return free[i].UploadID < free[j].UploadID
	})
	sort.SliceStable(atts, func(i, j int) bool {
		if !atts[i].WindowEnd.Equal(atts[j].WindowEnd) {
			return atts[i].WindowEnd.Before(atts[j].WindowEnd)
		}
		return atts[i].CreatedAt.Before(atts[j].CreatedAt)
	})
	for _, a := range atts {
		c.add(s.bindAttempt(ctx, a, &free))
	}
	return c
}

func (s *Service) bindAttempt(ctx context.Context, a UploadWithoutID, free *[]store.Upload) Counts {
	for i, u := range *free {
		if !mayHaveCreated(a, u.Initiated) {
			continue
		}
		var ok bool
		if s.dbDo(ctx, func(dctx context.Context) (err error) {
			ok, err = s.db.BindUpload(dctx, a.AttemptID, u.UploadID)
			return
		}) != nil {
			return Counts{Failed: 1}
		}
		*free = append((*free)[:i:i], (*free)[i+1:]...)
		if !ok {
			// The upload was bound to another attempt, or this attempt's
			// own Create recorded its id, meanwhile: look again later.
			_ = s.dbDo(ctx, func(dctx context.Context) error { return s.db.Unclaim(dctx, a.AttemptID, false) })
			return Counts{Skipped: 1}
		}
		s.log.Info("unrecorded multipart upload: bound to the upload its Create made at the store", "bucket", a.Bucket, "key", a.Key,
			"attempt", a.AttemptID, "upload_id", u.UploadID, "initiated", u.Initiated)
		return Counts{Completed: 1}
	}
	if a.Age >= s.cfg.UploadCreateGiveUp {
		reason := fmt.Sprintf("no upload at the store: none at its key initiated within its Create's window, looked for until %s after it",
			a.Age.Round(time.Second))
		if s.dbDo(ctx, func(dctx context.Context) error { return s.db.UnboundFailed(dctx, a.AttemptID, reason) }) != nil {
			return Counts{Failed: 1}
		}
		s.log.Info("unrecorded multipart upload: none at the store; the attempt is marked failed", "bucket", a.Bucket, "key", a.Key,
			"attempt", a.AttemptID)
		return Counts{Completed: 1}
	}
	// Not found (yet): looked for again after a back-off, until the give-up age.
	if s.dbDo(ctx, func(dctx context.Context) error {
		return s.db.RetryLater(dctx, a.AttemptID, s.backoff(a.Tries), "no upload at the store matches its Create yet")
	}) != nil {
		return Counts{Failed: 1}
	}
	return Counts{Skipped: 1}
}
