package meta

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/lease"
)

// The reconciler's lifecycle queries (docs/DESIGN.md, "The reconciler"). Every
// claim stamps a token and counts a try before the caller's storage I/O, takes
// the oldest (least recently tried) rows first, and skips rows another
// reconciler has locked. A claim names the claiming gateway's session
// (lease.Claim), and ends with it; a back-off or a rest binds no session.

// unclaimed is true of a work item (alias a) nobody holds: its claim or
// back-off ran out, or the session of the gateway that claimed it ended
// (or was pruned).
const unclaimed = `(a.claimed_until IS NULL OR a.claimed_until < clock_timestamp()
	OR (a.claim_session IS NOT NULL AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = a.claim_session
		AND ` + sessionLive + `)))`

// nullSession is a lease.Claim's session as a query argument.
func nullSession(c lease.Claim) any { return nullID(c.Session) }

// ClaimAbandonedUploads claims up to limit open multipart uploads created
// through fencegate whose creation and last recorded activity are older than
// idle, and none of whose Complete tries is leased or unknown.
func (c *Catalog) ClaimAbandonedUploads(ctx context.Context, limit int, idle time.Duration, claim lease.Claim) ([]lease.AbandonedUpload, error) {
	rows, err := c.Pool.Query(ctx, `WITH picked AS (
			SELECT attempt_id FROM attempts a
			WHERE op = 'multipart' AND state = 'open' AND upload_id IS NOT NULL
			  AND greatest(updated_at, coalesce(activity_at, updated_at)) < clock_timestamp() - $3::interval
			  AND `+unclaimed+`
			  AND NOT EXISTS (SELECT 1 FROM attempts t WHERE t.upload_attempt = a.attempt_id AND t.state IN ('leased', 'unknown'))
			ORDER BY coalesce(claimed_until, updated_at) LIMIT $1 FOR UPDATE SKIP LOCKED)
		UPDATE attempts a SET claim_token = $2, tries = tries + 1,
			claimed_until = clock_timestamp() + $4::interval, claim_session = $5
		FROM picked WHERE a.attempt_id = picked.attempt_id
		RETURNING a.attempt_id::text, a.bucket, a.key, a.upload_id, a.created_at, a.tries`,
		limit, lease.NewID(), idle.String(), claim.For.String(), nullSession(claim))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease.AbandonedUpload, error) {
		var u lease.AbandonedUpload
		err := r.Scan(&u.AttemptID, &u.Bucket, &u.Key, &u.UploadID, &u.CreatedAt, &u.Tries)
		return u, err
	})
}

const unboundColumns = `a.attempt_id::text, a.bucket, a.key, a.state, a.created_at,
	CASE WHEN a.state = 'unknown' THEN a.updated_at ELSE clock_timestamp() END,
	extract(epoch FROM clock_timestamp() - a.created_at)::float8, a.tries`

func scanUnbound(rows pgx.Rows, err error) ([]lease.UploadWithoutID, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease.UploadWithoutID, error) {
		var u lease.UploadWithoutID
		var age float64
		err := r.Scan(&u.AttemptID, &u.Bucket, &u.Key, &u.State, &u.CreatedAt, &u.WindowEnd, &age, &u.Tries)
		u.Age = time.Duration(age * float64(time.Second))
		return u, err
	})
}

// unboundWhere selects the multipart attempts without an upload id whose
// Create may have made one (alias a). The state test is an OR, not an IN
// list, so that the planner can answer it from two partial indexes
// (attempts_unresolved for unknown, attempts_open_uploads for open) instead
// of scanning every attempt.
const unboundWhere = `a.op = 'multipart' AND a.upload_id IS NULL AND (a.state = 'unknown' OR a.state = 'open')`

// ClaimUnboundUploads claims up to limit multipart attempts without an
// upload id whose outcome was recorded (or, open, whose Create began) longer
// than settle ago, oldest (least recently tried) first.
func (c *Catalog) ClaimUnboundUploads(ctx context.Context, limit int, settle time.Duration, claim lease.Claim) ([]lease.UploadWithoutID, error) {
	return scanUnbound(c.Pool.Query(ctx, `WITH picked AS (
			SELECT attempt_id FROM attempts a
			WHERE `+unboundWhere+` AND a.updated_at < clock_timestamp() - $3::interval
			  AND `+unclaimed+`
			ORDER BY coalesce(a.claimed_until, a.created_at) LIMIT $1 FOR UPDATE SKIP LOCKED)
		UPDATE attempts a SET claim_token = $2, tries = tries + 1,
			claimed_until = clock_timestamp() + $4::interval, claim_session = $5
		FROM picked WHERE a.attempt_id = picked.attempt_id
		RETURNING `+unboundColumns,
		limit, lease.NewID(), settle.String(), claim.For.String(), nullSession(claim)))
}

// UnboundUploads lists bucket/key's multipart attempts without an upload id
// (for the audit: an upload no attempt names may be one of theirs).
func (c *Catalog) UnboundUploads(ctx context.Context, bucket, key string) ([]lease.UploadWithoutID, error) {
	return scanUnbound(c.Pool.Query(ctx, `SELECT `+unboundColumns+` FROM attempts a
		WHERE a.bucket = $1 AND a.key = $2 AND `+unboundWhere+` ORDER BY a.created_at`, bucket, key))
}

// BoundUploads reports which of ids an attempt names.
func (c *Catalog) BoundUploads(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := c.Pool.Query(ctx, `SELECT upload_id FROM attempts WHERE upload_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	for _, id := range ids {
		out[id] = true
	}
	return out, err
}

// BindUpload records uploadID, found at the store, as the upload of a
// multipart attempt without one, and makes the attempt an open upload (its
// claim ended, its tries reset for the abandoned-upload clean-up; its
// updated_at kept, so its abandoned age counts from its Create). It reports
// false, changing nothing, when the attempt has an upload id or is settled
// by now, or another attempt names uploadID.
func (c *Catalog) BindUpload(ctx context.Context, attemptID, uploadID string) (bool, error) {
	tag, err := c.Pool.Exec(ctx, `UPDATE attempts a SET upload_id = $2, state = 'open',
			reason = 'upload id found at the store by the reconciler' || coalesce(' (' || a.reason || ')', ''),
			claim_token = NULL, claimed_until = NULL, tries = 0, last_error = NULL
		WHERE a.attempt_id = $1 AND `+unboundWhere+`
		  AND NOT EXISTS (SELECT 1 FROM attempts b WHERE b.upload_id = $2)`, attemptID, uploadID)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" { // bound to another attempt meanwhile (attempts_upload)
		return false, nil
	}
	return err == nil && tag.RowsAffected() == 1, err
}

// UnboundFailed marks a multipart attempt without an upload id failed: no
// upload that can be its was found at the store.
func (c *Catalog) UnboundFailed(ctx context.Context, attemptID, reason string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts a SET state = 'failed', reason = $2, updated_at = clock_timestamp(),
			claim_token = NULL, claimed_until = NULL, last_error = NULL
		WHERE a.attempt_id = $1 AND `+unboundWhere, attemptID, reason)
	return err
}

// EndCreate records how a CreateMultipartUpload ended when the store's
// answer carried no upload id (state unknown or failed), unless its attempt
// is no longer an open upload without an id (the reconciler found and bound
// its upload meanwhile: then the outcome is known).
func (c *Catalog) EndCreate(ctx context.Context, attemptID, state, reason string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts SET state = $2, reason = nullif($3, ''), updated_at = clock_timestamp()
		WHERE attempt_id = $1 AND state = 'open' AND upload_id IS NULL`, attemptID, state, reason)
	return err
}

// UploadActive records an upload's last activity (its newest part) and ends
// its claim: it is not abandoned yet.
func (c *Catalog) UploadActive(ctx context.Context, attemptID string, at time.Time) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts SET activity_at = greatest(activity_at, $2), claim_token = NULL, claimed_until = NULL, last_error = NULL
		WHERE attempt_id = $1`, attemptID, at)
	return err
}

// Unclaim ends an attempt's claim without a verdict (its key was busy).
// untried: no storage I/O was done for it, so its try is taken back.
func (c *Catalog) Unclaim(ctx context.Context, attemptID string, untried bool) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts SET claim_token = NULL, claimed_until = NULL,
		tries = CASE WHEN $2 THEN greatest(tries - 1, 0) ELSE tries END WHERE attempt_id = $1`, attemptID, untried)
	return err
}

// UploadAbortable reports, under the key's lease, that the upload is still open
// and no Complete try of it is leased or unknown.
func (c *Catalog) UploadAbortable(ctx context.Context, attemptID string) (bool, error) {
	var ok bool
	err := c.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM attempts a WHERE attempt_id = $1 AND state = 'open'
		AND NOT EXISTS (SELECT 1 FROM attempts t WHERE t.upload_attempt = a.attempt_id AND t.state IN ('leased', 'unknown')))`,
		attemptID).Scan(&ok)
	return ok, err
}

// UploadAborted records that the reconciler aborted an abandoned upload.
func (c *Catalog) UploadAborted(ctx context.Context, attemptID, reason string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts SET state = 'aborted', reason = $2, updated_at = clock_timestamp(),
		claim_token = NULL, claimed_until = NULL, last_error = NULL
		WHERE attempt_id = $1 AND state = 'open'`, attemptID, reason)
	return err
}

// RetryLater keeps an attempt's claim (its token stays) and pushes its next
// try back by backoff: a store failure, retried without giving the item up.
// The back-off holds whoever made it, its session alive or not.
func (c *Catalog) RetryLater(ctx context.Context, attemptID string, backoff time.Duration, errText string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts SET claimed_until = clock_timestamp() + $2::interval, claim_session = NULL, last_error = $3
		WHERE attempt_id = $1`, attemptID, backoff.String(), errText)
	return err
}

// ClaimAuditCursor claims the bucket whose audit is least recently advanced
// (every bucket the catalog knows gets a cursor), among only (if not empty),
// or returns false.
func (c *Catalog) ClaimAuditCursor(ctx context.Context, only []string, claim lease.Claim) (lease.Cursor, bool, error) {
	if _, err := c.Pool.Exec(ctx, `INSERT INTO audit_cursors (bucket)
		SELECT bucket FROM buckets UNION SELECT DISTINCT bucket FROM catalog ON CONFLICT DO NOTHING`); err != nil {
		return lease.Cursor{}, false, err
	}
	var cur lease.Cursor
	err := c.Pool.QueryRow(ctx, `WITH picked AS (
			SELECT bucket FROM audit_cursors a WHERE `+unclaimed+`
			  AND (coalesce(cardinality($3::text[]), 0) = 0 OR bucket = ANY($3))
			ORDER BY coalesce(passed_at, '-infinity'), bucket LIMIT 1 FOR UPDATE SKIP LOCKED)
		UPDATE audit_cursors a SET claim_token = $1, tries = tries + 1, claimed_until = clock_timestamp() + $2::interval,
			claim_session = $4
		FROM picked WHERE a.bucket = picked.bucket
		RETURNING a.bucket, a.marker, a.after_key, a.upload_key, a.upload_id, a.rounds, a.tries`,
		lease.NewID(), claim.For.String(), only, nullSession(claim)).Scan(&cur.Bucket, &cur.Marker, &cur.AfterKey, &cur.UploadKey, &cur.UploadID, &cur.Rounds, &cur.Tries)
	if errors.Is(err, pgx.ErrNoRows) {
		return lease.Cursor{}, false, nil
	}
	return cur, err == nil, err
}

// AdvanceAuditCursor stores where the bucket's audit continues and holds the
// bucket off for rest (one page per bucket per pass).
func (c *Catalog) AdvanceAuditCursor(ctx context.Context, cur lease.Cursor, roundDone bool, rest time.Duration) error {
	_, err := c.Pool.Exec(ctx, `UPDATE audit_cursors SET marker = $2, after_key = $3, upload_key = $4, upload_id = $5,
		rounds = rounds + CASE WHEN $6 THEN 1 ELSE 0 END, tries = 0, last_error = NULL, passed_at = clock_timestamp(),
		claim_token = NULL, claimed_until = clock_timestamp() + $7::interval, claim_session = NULL
		WHERE bucket = $1`, cur.Bucket, cur.Marker, cur.AfterKey, cur.UploadKey, cur.UploadID, roundDone, rest.String())
	return err
}

// AuditCursorFailed keeps the cursor where it was, claimed for backoff.
func (c *Catalog) AuditCursorFailed(ctx context.Context, bucket string, backoff time.Duration, errText string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE audit_cursors SET claimed_until = clock_timestamp() + $2::interval, claim_session = NULL, last_error = $3
		WHERE bucket = $1`, bucket, backoff.String(), errText)
	return err
}

// CatalogRange reads the catalog's live (not deleted) rows of bucket with
// keys in (after, upto] in byte order ("" upto: no upper bound), under prefix.
func (c *Catalog) CatalogRange(ctx context.Context, bucket, prefix, after, upto string) (map[string]lease.Entry, error) {
	rows, err := c.Pool.Query(ctx, `SELECT key, generation, coalesce(etag, ''), coalesce(size, -1), coalesce(attempt_id::text, ''), origin
		FROM catalog WHERE bucket = $1 AND NOT deleted
		  AND key COLLATE "C" > $2 AND ($3 = '' OR key COLLATE "C" <= $3)
		  AND ($4 = '' OR starts_with(key, $4))`, bucket, after, upto, prefix)
	if err != nil {
		return nil, err
	}
	out := map[string]lease.Entry{}
	for rows.Next() {
		var k string
		var e lease.Entry
		if err := rows.Scan(&k, &e.Generation, &e.ETag, &e.Size, &e.AttemptID, &e.Origin); err != nil {
			rows.Close()
			return nil, err
		}
		out[k] = e
	}
	return out, rows.Err()
}

// UploadTracked reports whether fencegate created the upload (an attempt
// names its id).
func (c *Catalog) UploadTracked(ctx context.Context, uploadID string) (bool, error) {
	var ok bool
	err := c.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM attempts WHERE upload_id = $1)`, uploadID).Scan(&ok)
	return ok, err
}

// ForeignUploadSeen records a multipart upload found at the store that
// fencegate did not create; aborted marks it aborted.
func (c *Catalog) ForeignUploadSeen(ctx context.Context, bucket, key, uploadID string, initiated time.Time, aborted bool) error {
	var init any
	if !initiated.IsZero() {
		init = initiated
	}
	_, err := c.Pool.Exec(ctx, `INSERT INTO foreign_uploads (bucket, key, upload_id, initiated, aborted_at)
		VALUES ($1, $2, $3, $4, CASE WHEN $5 THEN clock_timestamp() END)
		ON CONFLICT (upload_id) DO UPDATE SET last_seen = clock_timestamp(),
			aborted_at = coalesce(foreign_uploads.aborted_at, EXCLUDED.aborted_at)`, bucket, key, uploadID, init, aborted)
	return err
}

// Prune deletes at most limit rows of each kind that retention allows:
// attempts settled (committed, adopted, failed, aborted) longer ago than
// r.Attempts that no catalog row and no unresolved Complete try points at;
// outbox rows older than r.Outbox below every registered consumer's
// acknowledgement (none without a consumer); lease rows not held for
// r.Leases of keys without unresolved or open attempts or recent activity,
// and the recorded last passes of gateways that ran none for as long;
// reservations ended longer ago than r.Attempts, with their events and
// bound attempts: expired and cancelled ones once swept, committed ones once
// their object left the account's used bytes (overwritten or deleted) or
// when they count against no account (the commit trigger still needs the
// row of a committed object an account pays for). Unknown and leased
// attempts (guards), open uploads and live reservations are never pruned.
func (c *Catalog) Prune(ctx context.Context, r lease.Retention, limit int) (lease.Pruned, error) {
	var p lease.Pruned
	if r.Attempts > 0 {
		tag, err := c.Pool.Exec(ctx, `DELETE FROM attempts WHERE attempt_id IN (
			SELECT attempt_id FROM attempts a
			WHERE state IN ('committed', 'adopted', 'failed', 'aborted') AND updated_at < clock_timestamp() - $1::interval
			  AND NOT EXISTS (SELECT 1 FROM catalog c WHERE c.bucket = a.bucket AND c.key = a.key AND c.attempt_id = a.attempt_id)
			  AND NOT EXISTS (SELECT 1 FROM attempts t WHERE t.upload_attempt = a.attempt_id AND t.state IN ('leased', 'unknown'))
			ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, r.Attempts.String(), limit)
		if err != nil {
			return p, err
		}
		p.Attempts = int(tag.RowsAffected())
		if err := c.Pool.QueryRow(ctx, `WITH gone AS (
				DELETE FROM reservations WHERE reservation_id IN (
					SELECT reservation_id FROM reservations
					WHERE state <> 'reserved' AND ended_at < clock_timestamp() - $1::interval
					  AND (state IN ('expired', 'cancelled') AND swept_at IS NOT NULL
					       OR state = 'committed' AND (released_at IS NOT NULL OR account IS NULL)
					       OR state = 'failed')
					ORDER BY ended_at LIMIT $2 FOR UPDATE SKIP LOCKED)
				RETURNING reservation_id),
			events AS (DELETE FROM reservation_events WHERE reservation_id IN (SELECT reservation_id FROM gone))
			SELECT count(*) FROM gone`, r.Attempts.String(), limit).Scan(&p.Reservations); err != nil {
			return p, err
		}
	}
	if r.Outbox > 0 {
		tag, err := c.Pool.Exec(ctx, `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox WHERE id <= (SELECT min(acked_id) FROM outbox_consumers)
			  AND committed_at < clock_timestamp() - $1::interval
			ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)`, r.Outbox.String(), limit)
		if err != nil {
			return p, err
		}
		p.Outbox = int(tag.RowsAffected())
	}
	if r.Leases > 0 {
		tag, err := c.Pool.Exec(ctx, `DELETE FROM leases WHERE (bucket, key) IN (
			SELECT bucket, key FROM leases l
			WHERE (holder IS NULL OR expires_at < clock_timestamp() - $1::interval)
			  AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.bucket = l.bucket AND a.key = l.key
			      AND (a.state IN ('leased', 'unknown', 'open') OR a.updated_at > clock_timestamp() - $1::interval))
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, r.Leases.String(), limit)
		if err != nil {
			return p, err
		}
		p.Leases = int(tag.RowsAffected())
		// Last passes of gateways gone for as long (fencegate status).
		if _, err := c.Pool.Exec(ctx, `DELETE FROM reconciler_passes WHERE started_at < clock_timestamp() - $1::interval`, r.Leases.String()); err != nil {
			return p, err
		}
	}
	return p, nil
}

// RecordPass stores a work kind's last pass for this gateway.
func (c *Catalog) RecordPass(ctx context.Context, p lease.Pass) error {
	_, err := c.Pool.Exec(ctx, `INSERT INTO reconciler_passes (kind, gateway, started_at, duration_ms, batches, claimed, completed, retried, skipped, failed)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (kind, gateway) DO UPDATE SET started_at = EXCLUDED.started_at, duration_ms = EXCLUDED.duration_ms,
			batches = EXCLUDED.batches, claimed = EXCLUDED.claimed, completed = EXCLUDED.completed, retried = EXCLUDED.retried,
			skipped = EXCLUDED.skipped, failed = EXCLUDED.failed`,
		p.Kind, p.Gateway, p.StartedAt, p.Duration.Milliseconds(), p.Batches, p.Claimed, p.Completed, p.Retried, p.Skipped, p.Failed)
	return err
}
