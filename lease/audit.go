package lease

import (
	"context"
	"errors"
	"time"

	"github.com/fencegate/fencegate/store"
)

// Divergence kinds an audit reports.
const (
	Unrecorded     = "unrecorded"      // an object the catalog has no live entry for
	Missing        = "missing"         // a live catalog entry with no object at the store
	Differs        = "differs"         // the object's ETag or size is not the catalog's
	UnknownAttempt = "unknown_attempt" // bytes whose attempt id names an attempt the catalog has unresolved or not at all
	ForeignUpload  = "foreign_upload"  // a multipart upload in progress that fencegate did not create
	// UnboundUpload: a multipart upload in progress that no attempt names
	// yet, but that a multipart attempt at its key whose Create left no
	// upload id in the catalog (answer lost, or id not recorded) may have
	// created: the uploads work kind binds it to that attempt.
	UnboundUpload = "unbound_upload"
)

// Finding is one divergence between the store and the catalog.
type Finding struct {
	Kind        string `json:"kind"`
	Bucket      string `json:"bucket"`
	Key         string `json:"key"`
	StoreETag   string `json:"store_etag,omitempty"`
	StoreSize   int64  `json:"store_size,omitempty"`
	CatalogETag string `json:"catalog_etag,omitempty"`
	CatalogSize int64  `json:"catalog_size,omitempty"`
	AttemptID   string `json:"attempt_id,omitempty"`
	UploadID    string `json:"upload_id,omitempty"`
}

// Auditor compares a bucket's objects with the catalog, a page at a time.
type Auditor struct {
	DB interface {
		LifecycleDriver
		AttemptByID(ctx context.Context, id string) (Attempt, error)
	}
	Store     LifecycleStore
	DBTimeout time.Duration
}

func (a Auditor) dbctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(a.DBTimeout, time.Second))
}

// AuditPage lists one page of bucket (under prefix) after the continuation
// marker `after`, whose previous page ended at key afterKey, and compares it
// with the catalog rows in the same key range. It returns the findings and
// the marker and last key to continue from (next "" after the last page).
func (a Auditor) AuditPage(ctx context.Context, bucket, prefix, after, afterKey string, max int) (findings []Finding, next, lastKey string, err error) {
	page, err := a.Store.ListPage(ctx, bucket, prefix, after, max)
	if err != nil {
		return nil, after, afterKey, err
	}
	upto := ""
	if page.Next != "" && len(page.Objects) > 0 {
		upto = page.Objects[len(page.Objects)-1].Key
	}
	dctx, cancel := a.dbctx(ctx)
	rows, err := a.DB.CatalogRange(dctx, bucket, prefix, afterKey, upto)
	cancel()
	if err != nil {
		return nil, after, afterKey, err
	}
	for _, o := range page.Objects {
		e, ok := rows[o.Key]
		delete(rows, o.Key)
		if ok && e.ETag == o.ETag && (e.Size < 0 || e.Size == o.Size) {
			continue
		}
		f := Finding{Kind: Unrecorded, Bucket: bucket, Key: o.Key, StoreETag: o.ETag, StoreSize: o.Size}
		if ok {
			f.Kind, f.CatalogETag, f.CatalogSize = Differs, e.ETag, e.Size
		}
		// The bytes' attribution: a HEAD (bounded).
		hctx, cancel := context.WithTimeout(ctx, headTimeout)
		obj, err := a.Store.Head(hctx, bucket, o.Key)
		cancel()
		if err != nil {
			return nil, after, afterKey, err
		}
		if obj.AttemptID != "" {
			f.AttemptID = obj.AttemptID
			dctx, cancel := a.dbctx(ctx)
			att, err := a.DB.AttemptByID(dctx, obj.AttemptID)
			cancel()
			switch {
			case errors.Is(err, ErrNotFound) || err == nil && (att.Bucket != bucket || att.Key != o.Key):
				f.Kind = UnknownAttempt
			case err != nil:
				return nil, after, afterKey, err
			case att.State == StateUnknown || att.State == StateLeased:
				f.Kind = UnknownAttempt
			}
		}
		findings = append(findings, f)
	}
	for k, e := range rows {
		findings = append(findings, Finding{Kind: Missing, Bucket: bucket, Key: k, CatalogETag: e.ETag, CatalogSize: e.Size})
	}
	last := afterKey
	if len(page.Objects) > 0 {
		last = page.Objects[len(page.Objects)-1].Key
	}
	if page.Next == "" {
		last = ""
	}
	return findings, page.Next, last, nil
}

// ForeignUploads lists one page of bucket's multipart uploads in progress
// and returns those no attempt names: foreign ones, which fencegate did not
// create, and unbound ones, which a multipart attempt at their key whose
// Create left no upload id in the catalog may have created (initiated
// within its Create's window, or without an Initiated time to tell): those
// are the uploads work kind's to bind, never the foreign policy's.
func (a Auditor) ForeignUploads(ctx context.Context, bucket, keyMarker, uploadMarker string, max int) (foreign, unbound []store.Upload, p store.UploadsPage, err error) {
	p, err = a.Store.ListMultipartUploads(ctx, bucket, keyMarker, uploadMarker, max)
	if err != nil {
		return nil, nil, p, err
	}
	attempts := map[string][]UploadWithoutID{} // by key, read once per page
	for _, u := range p.Uploads {
		dctx, cancel := a.dbctx(ctx)
		tracked, err := a.DB.UploadTracked(dctx, u.UploadID)
		cancel()
		if err != nil {
			return nil, nil, p, err
		}
		if tracked {
			continue
		}
		atts, seen := attempts[u.Key]
		if !seen {
			dctx, cancel := a.dbctx(ctx)
			atts, err = a.DB.UnboundUploads(dctx, bucket, u.Key)
			cancel()
			if err != nil {
				return nil, nil, p, err
			}
			attempts[u.Key] = atts
		}
		ours := false
		for _, at := range atts {
			if u.Initiated.IsZero() || mayHaveCreated(at, u.Initiated) {
				ours = true
				break
			}
		}
		if ours {
			unbound = append(unbound, u)
		} else {
			foreign = append(foreign, u)
		}
	}
	return foreign, unbound, p, nil
}

// auditBatch advances one bucket's incremental audit by one page: its
// divergent keys are settled (the ordinary settle path, under each key's
// lease: external, adopted or delete generations; bytes are never deleted),
// and one page of its multipart uploads is checked for foreign ones, handled
// by the foreign upload policy. A store failure leaves the cursor where it
// was, claimed for a back-off.
func (s *Service) auditBatch(ctx context.Context) (Counts, bool, error) {
	var c Counts
	dctx, cancel := s.m.dbctx(ctx)
	cur, ok, err := s.db.ClaimAuditCursor(dctx, s.cfg.AuditBuckets, s.m.claim(s.cfg.ClaimFor))
	cancel()
	if err != nil || !ok {
		return c, false, err
	}
	c.Claimed = 1
	aud := s.auditor()
	ictx, icancel := context.WithTimeout(ctx, itemBudget)
	defer icancel()
	fail := func(err error) (Counts, bool, error) {
		s.log.Warn("audit: store failure; the bucket's cursor stays and is tried again", "bucket", cur.Bucket, "err", err)
		if s.dbDo(ctx, func(dctx context.Context) error {
			return s.db.AuditCursorFailed(dctx, cur.Bucket, s.backoff(cur.Tries), err.Error())
		}) != nil {
			c.Failed++
		} else {
			c.Retried++
		}
		return c, true, nil
	}
	findings, next, lastKey, err := aud.AuditPage(ictx, cur.Bucket, "", cur.Marker, cur.AfterKey, s.cfg.AuditPage)
	if err != nil {
		return fail(err)
	}
	for _, f := range findings {
		s.log.Info("audit: divergence found; settling the key", "kind", f.Kind, "bucket", f.Bucket, "key", f.Key)
		if err := s.m.SettleKey(ictx, f.Bucket, f.Key, s.store, false); err != nil && !errors.Is(err, ErrBusy) {
			return fail(err)
		}
	}
	// Unbound uploads are left to the uploads kind, which binds them.
	foreign, _, up, err := aud.ForeignUploads(ictx, cur.Bucket, cur.UploadKey, cur.UploadID, s.cfg.AuditPage)
	if err != nil {
		return fail(err)
	}
	for _, u := range foreign {
		abort := s.cfg.ForeignUploads == ForeignAbort && !u.Initiated.IsZero() && time.Since(u.Initiated) >= s.cfg.ForeignUploadAge
		if abort {
			if err := s.store.AbortMultipartUpload(ictx, cur.Bucket, u.Key, u.UploadID); err != nil && !errors.Is(err, store.ErrNoSuchUpload) {
				return fail(err)
			}
			s.log.Info("audit: aborted a multipart upload created around the gateway", "bucket", cur.Bucket, "key", u.Key, "upload_id", u.UploadID)
		} else {
			s.log.Info("audit: multipart upload created around the gateway (reported only)", "bucket", cur.Bucket, "key", u.Key, "upload_id", u.UploadID)
		}
		if s.dbDo(ctx, func(dctx context.Context) error {
			return s.db.ForeignUploadSeen(dctx, cur.Bucket, u.Key, u.UploadID, u.Initiated, abort)
		}) != nil {
			c.Failed++
			return c, true, nil
		}
	}
	cur.Marker, cur.AfterKey, cur.UploadKey, cur.UploadID = next, lastKey, up.NextKey, up.NextUploadID
	if s.dbDo(ctx, func(dctx context.Context) error {
		return s.db.AdvanceAuditCursor(dctx, cur, next == "", s.cfg.AuditRest)
	}) != nil {
		c.Failed++
		return c, true, nil
	}
	c.Completed = 1
	return c, true, nil
}

func (s *Service) auditor() Auditor {
	return Auditor{DB: auditDB{s.db, s.m.db}, Store: s.store, DBTimeout: s.m.cfg.DBTimeout}
}

type auditDB struct {
	LifecycleDriver
	d Driver
}

func (a auditDB) AttemptByID(ctx context.Context, id string) (Attempt, error) {
	return a.d.AttemptByID(ctx, id)
}
