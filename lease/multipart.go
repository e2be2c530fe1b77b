package lease

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// A multipart upload is an attempt from its CreateMultipartUpload on: the
// attempt is recorded open before the store sees the Create (W1), takes no
// key lease (an upload publishes nothing; its Complete does, through
// Write), and ends when the upload is completed, aborted, or found
// abandoned. CreateUpload, UploadAborted and UploadByID are its steps, as
// the gateway calls them.

// Created is the store's answer to a CreateMultipartUpload, as the sender
// read it.
type Created struct {
	// NotSent: the sender refused the request before any byte went out;
	// Err says why.
	NotSent bool
	// Err: no answer came; the store may have created the upload.
	Err    error
	Status int
	// UploadID is the id a 200 answer names; AnswerErr, that the 200 carried
	// an error instead.
	UploadID  string
	AnswerErr error
}

// ErrUploadUnrecorded: the store created the upload and recording its id
// failed; the reconciler binds it from the store (unbound.go).
var ErrUploadUnrecorded = errors.New("the upload's id could not be recorded")

// CreateUpload records a multipart upload's attempt, sends its Create
// through send (which tags the upload with the attempt id), and records how
// it ended: its upload id, failed (the store refused it, nothing sent), or
// unknown (no answer, a 5xx, an error in a 200: an upload may exist at the
// store, for the reconciler to find). An error from recording the attempt
// means nothing was sent.
func (m *Manager) CreateUpload(ctx context.Context, bucket, key string, send func(attemptID string) Created) error {
	id := NewID()
	dctx, cancel := m.dbctx(ctx)
	err := m.db.RecordAttempt(dctx, Attempt{ID: id, Bucket: bucket, Key: key, Op: KindMultipart,
		State: StateOpen, Gateway: m.cfg.Gateway, DeclaredSize: -1})
	cancel()
	if err != nil {
		return fmt.Errorf("recording the upload's attempt: %w", err)
	}
	ans := send(id)
	status := fmt.Sprintf("the store answered %d %s", ans.Status, http.StatusText(ans.Status))
	switch {
	case ans.NotSent:
		m.endCreate(ctx, id, StateFailed, fmt.Sprintf("request refused before sending: %v", ans.Err))
		return ans.Err
	case ans.Err != nil:
		m.endCreate(ctx, id, StateUnknown, fmt.Sprintf("no answer from the store: %v", ans.Err))
		return ans.Err
	case ans.Status >= 500:
		m.endCreate(ctx, id, StateUnknown, status)
		return nil
	case ans.Status != http.StatusOK:
		m.endCreate(ctx, id, StateFailed, "the store refused CreateMultipartUpload: "+status)
		return nil
	case ans.AnswerErr != nil:
		m.endCreate(ctx, id, StateUnknown, fmt.Sprintf("the store's success answer carried an error: %v", ans.AnswerErr))
		return ans.AnswerErr
	}
	dctx, cancel = m.dbctx(ctx)
	defer cancel()
	if err := m.db.SetUploadID(dctx, id, ans.UploadID); err != nil {
		return fmt.Errorf("%w (attempt %s, upload %s): %w", ErrUploadUnrecorded, id, ans.UploadID, err)
	}
	return nil
}

// endCreate records a Create's outcome, unless the reconciler has bound the
// attempt to an upload it found at the store meanwhile (a Create in flight
// longer than the upload-create settle delay): its outcome is known. A
// failure to record leaves the attempt open without an upload id, which
// the reconciler treats as unknown.
func (m *Manager) endCreate(ctx context.Context, id, state, reason string) {
	dctx, cancel := m.dbctx(ctx)
	defer cancel()
	_ = m.db.EndCreate(dctx, id, state, reason)
}

// UploadAborted records that the client aborted an upload (the store said
// so); an upload fencegate did not create is no attempt of its.
func (m *Manager) UploadAborted(ctx context.Context, uploadID string) error {
	dctx, cancel := m.dbctx(ctx)
	defer cancel()
	a, err := m.db.AttemptByUpload(dctx, uploadID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return m.db.SetState(dctx, a.ID, StateOpen, StateAborted, "aborted by the client")
}

// UploadByID finds an upload's attempt; ok is false for an upload fencegate
// did not create.
func (m *Manager) UploadByID(ctx context.Context, uploadID string) (u Upload, ok bool, err error) {
	dctx, cancel := m.dbctx(ctx)
	defer cancel()
	a, err := m.db.AttemptByUpload(dctx, uploadID)
	if errors.Is(err, ErrNotFound) {
		return Upload{}, false, nil
	}
	if err != nil {
		return Upload{}, false, err
	}
	return uploadOf(a), true, nil
}

// Upload is a multipart upload's attempt as the gateway needs it at Complete.
type Upload struct {
	AttemptID  string
	Bucket     string
	Key        string
	ETag       string
	Generation int64
	state      string
}

// uploadOf reads an upload's attempt row.
func uploadOf(a Attempt) Upload {
	return Upload{AttemptID: a.ID, Bucket: a.Bucket, Key: a.Key, ETag: a.ETag, Generation: a.Generation, state: a.State}
}

// Published reports an upload whose Complete became a generation (committed,
// or adopted after an unknown outcome): a repeated Complete gets that answer.
func (u Upload) Published() bool {
	return u.state == StateCommitted || u.state == StateAdopted
}
