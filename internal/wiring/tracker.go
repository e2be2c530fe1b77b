package wiring

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// Tracker serves gateway's bucket and multipart bookkeeping from meta.Catalog.
type Tracker struct {
	Catalog *meta.Catalog
	Gateway string
}

func (t Tracker) BucketCreated(ctx context.Context, bucket string) error {
	return t.Catalog.MarkBucket(ctx, bucket, true)
}

func (t Tracker) BucketDeleted(ctx context.Context, bucket string) error {
	return t.Catalog.ForgetBucket(ctx, bucket)
}

func (t Tracker) UploadStarted(ctx context.Context, bucket, key, attemptID string) error {
	return t.Catalog.RecordAttempt(ctx, meta.Attempt{ID: attemptID, Bucket: bucket, Key: key, Op: "multipart",
		State: meta.StateOpen, Gateway: t.Gateway, DeclaredSize: -1})
}

func (t Tracker) UploadCreated(ctx context.Context, attemptID, uploadID string) error {
	return t.Catalog.SetUploadID(ctx, attemptID, uploadID)
}

// UploadFailed and UploadUnknown leave alone an attempt the reconciler has
// bound to an upload it found at the store meanwhile (a Create in flight
// longer than --upload-create-settle): its outcome is known.
func (t Tracker) UploadFailed(ctx context.Context, attemptID string) error {
	return t.Catalog.EndCreate(ctx, attemptID, meta.StateFailed, "the store refused CreateMultipartUpload")
}

func (t Tracker) UploadUnknown(ctx context.Context, attemptID, reason string) error {
	return t.Catalog.EndCreate(ctx, attemptID, meta.StateUnknown, reason)
}

func (t Tracker) UploadAborted(ctx context.Context, uploadID string) error {
	a, err := t.Catalog.AttemptByUpload(ctx, uploadID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return t.Catalog.SetState(ctx, a.ID, meta.StateOpen, meta.StateAborted, "aborted by the client")
}

func (t Tracker) UploadAttempt(ctx context.Context, uploadID string) (lease.Upload, bool, error) {
	a, err := t.Catalog.AttemptByUpload(ctx, uploadID)
	if errors.Is(err, pgx.ErrNoRows) {
		return lease.Upload{}, false, nil
	}
	return lease.UploadOf(a), err == nil, err
}
