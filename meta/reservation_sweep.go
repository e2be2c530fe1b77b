package meta

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lease"
)

// The reservation sweeper's side of the catalog (the lifecycle service's
// reservations kind, docs/RESERVATIONS.md "The sweeper").

// ExpireReservations ends at most limit reservations past their expiry,
// oldest expiry first, each claimed and ended in one statement (quota
// released, event written); rows another gateway is ending are skipped.
// With the methods below it makes Catalog a lease.ReservationSweeper.
func (c *Catalog) ExpireReservations(ctx context.Context, limit int) (int, error) {
	var n int
	err := c.Pool.QueryRow(ctx, `WITH due AS (
			SELECT reservation_id FROM reservations
			WHERE state = 'reserved' AND expires_at <= clock_timestamp()
			ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
		SELECT count(*) FROM (SELECT (fencegate_reservation_end(reservation_id, 'expired', true)).reservation_id AS id FROM due) e
		WHERE id IS NOT NULL`, limit).Scan(&n)
	return n, err
}

// ClaimEndedReservations marks swept the ended reservations whose attempts
// left nothing to clean up (none unresolved, no upload open, none current
// at the key), and claims at most limit of the others, oldest end first.
func (c *Catalog) ClaimEndedReservations(ctx context.Context, limit int, claim lease.Claim) ([]lease.EndedReservation, error) {
	if _, err := c.Pool.Exec(ctx, `UPDATE reservations r SET swept_at = clock_timestamp()
		WHERE r.state IN ('expired', 'cancelled') AND r.swept_at IS NULL
		  AND NOT EXISTS (SELECT 1 FROM reservation_attempts a JOIN attempts t USING (attempt_id)
			WHERE a.reservation_id = r.reservation_id AND t.state IN ('leased', 'unknown', 'open'))
		  AND NOT EXISTS (SELECT 1 FROM reservation_attempts a JOIN catalog k ON k.attempt_id = a.attempt_id
			WHERE a.reservation_id = r.reservation_id AND k.bucket = r.bucket AND k.key = r.key AND NOT k.deleted)`); err != nil {
		return nil, err
	}
	rows, err := c.Pool.Query(ctx, `UPDATE reservations SET claim_token = gen_random_uuid(),
			claimed_until = clock_timestamp() + $2::interval, claim_session = $3, tries = tries + 1
		WHERE reservation_id IN (SELECT reservation_id FROM reservations a
			WHERE state IN ('expired', 'cancelled') AND swept_at IS NULL AND `+unclaimed+`
			ORDER BY ended_at LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING reservation_id::text, bucket, key, tries`, limit, claim.For.String(), nullSession(claim))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (lease.EndedReservation, error) {
		var e lease.EndedReservation
		err := row.Scan(&e.ID, &e.Bucket, &e.Key, &e.Tries)
		return e, err
	})
}

// ReservationUploads are the open multipart uploads bound to the
// reservation at its key whose upload id is recorded, oldest first.
func (c *Catalog) ReservationUploads(ctx context.Context, id string) ([]lease.ReservationUpload, error) {
	rows, err := c.Pool.Query(ctx, `SELECT t.attempt_id::text, t.upload_id FROM reservations r
		JOIN reservation_attempts a ON a.reservation_id = r.reservation_id
		JOIN attempts t ON t.attempt_id = a.attempt_id AND t.bucket = r.bucket AND t.key = r.key
		WHERE r.reservation_id = $1 AND t.op = 'multipart' AND t.state = 'open' AND t.upload_id IS NOT NULL
		ORDER BY t.created_at`, id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (lease.ReservationUpload, error) {
		var u lease.ReservationUpload
		err := row.Scan(&u.AttemptID, &u.UploadID)
		return u, err
	})
}

// ReservationBytes is the ETag of the key's current generation when it is
// one of the reservation's attempts' bytes.
func (c *Catalog) ReservationBytes(ctx context.Context, id string) (string, bool, error) {
	var etag *string
	err := c.Pool.QueryRow(ctx, `SELECT k.etag FROM reservations r
		JOIN catalog k ON k.bucket = r.bucket AND k.key = r.key AND NOT k.deleted
		JOIN reservation_attempts a ON a.attempt_id = k.attempt_id AND a.reservation_id = r.reservation_id
		WHERE r.reservation_id = $1`, id).Scan(&etag)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && etag == nil {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return *etag, true, nil
}

// ReservationSwept records that nothing of an ended reservation is left:
// none of its attempts may still land (leased, unknown) or is an upload
// still open (one whose id is not recorded yet waits for the uploads kind
// to bind it, and the sweep to abort it).
func (c *Catalog) ReservationSwept(ctx context.Context, id string) error {
	tag, err := c.Pool.Exec(ctx, `UPDATE reservations r SET swept_at = clock_timestamp(), claim_token = NULL,
		claimed_until = NULL, last_error = NULL WHERE reservation_id = $1
		  AND NOT EXISTS (SELECT 1 FROM reservation_attempts a JOIN attempts t USING (attempt_id)
			WHERE a.reservation_id = r.reservation_id AND t.state IN ('leased', 'unknown', 'open'))`, id)
	if err == nil && tag.RowsAffected() == 0 {
		return lease.ErrReservationAttemptsOpen
	}
	return err
}

// ReservationRetry keeps a reservation's claim for backoff after a store
// failure.
func (c *Catalog) ReservationRetry(ctx context.Context, id string, backoff time.Duration, errText string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE reservations SET claimed_until = clock_timestamp() + $2::interval, claim_session = NULL, last_error = $3
		WHERE reservation_id = $1`, id, backoff.String(), errText)
	return err
}
