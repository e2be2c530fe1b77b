package meta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lease"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Catalog holds every query of the write protocol. Each method is one short
// transaction; none waits on storage I/O.
type Catalog struct {
	Pool *pgxpool.Pool
	// SingleCalls sends each Acquire and Commit in a transaction of its own
	// instead of batching concurrent ones (batch.go): for measurements.
	SingleCalls bool
	// WritesInFlight, if set, says how many of this gateway's writes hold
	// a lease now (lease.Manager.HeldLeases): each will send its commit
	// soon, so while there are many a batch waits a moment for their calls
	// (batch.go).
	WritesInFlight func() int

	writes     writeBatcher
	writesOnce sync.Once

	notifyOnce sync.Once
	notifier   *outboxNotifier
}

// Acquire takes the key's lease for p.Attempt if it is free or its holder is
// no longer live (its lease expired or its session died; see LiveLease) and
// records the attempt as leased, in one transaction (W1, W2). A previous
// holder that lost the lease becomes unknown: it may have landed. While
// another holder is live it returns a *Held error (and writes nothing, except
// a waiter's mark: see AcquireParams.Wait).
func (c *Catalog) Acquire(ctx context.Context, p lease.AcquireParams) (*lease.Acquired, error) {
	mode := "new"
	if p.NoAttempt {
		mode = "settle"
	}
	a := p.Attempt
	var ok bool
	var deadFor, liveFor *float64
	var ks *lease.KeyState
	var bound *bool
	bindable := a.Reservation != "" && mode == "new" && validUUID(a.Reservation) && validUUID(a.ID)
	// The key's state rides in the same round trip, read after the lease row
	// is locked: the writer settles from it (KeyState).
	err := c.call(ctx, &batchedCall{bucket: p.Bucket, key: p.Key, queue: func(b *pgx.Batch) {
		ok, deadFor, liveFor, ks, bound = false, nil, nil, &lease.KeyState{}, nil
		b.Queue(`SELECT acquired, dead_session_for, holder_live_for FROM fencegate_acquire($1, $2, $3, $4::interval, $5, $6, $7, $8, $9, $10, $11, $12)`,
			p.Bucket, p.Key, a.ID, p.TTL.String(), mode, a.Op, a.Gateway, nullSize(a.DeclaredSize), a.Checksum, nullID(a.UploadAttempt),
			nullID(p.Session), p.Wait).
			QueryRow(func(row pgx.Row) error { return row.Scan(&ok, &deadFor, &liveFor) })
		queueKeyState(b, p.Bucket, p.Key, a.ID, ks)
		if bindable {
			// The write's reservation is bound in the acquire's transaction
			// (saving the bind's own: docs/COST.md), only if the acquire
			// took the lease; NULL otherwise.
			b.Queue(`SELECT CASE WHEN EXISTS (SELECT 1 FROM attempts WHERE attempt_id = $2 AND state = 'leased')
					THEN fencegate_reservation_bind($1, $2, $3, $4) END`, a.Reservation, a.ID, p.Bucket, p.Key).
				QueryRow(func(row pgx.Row) error { return row.Scan(&bound) })
		}
	}})
	if err != nil {
		return nil, err
	}
	if !ok {
		h := &lease.Held{}
		if liveFor != nil {
			h.LiveFor = time.Duration(*liveFor * float64(time.Second))
		}
		return nil, h
	}
	acq := &lease.Acquired{State: ks}
	if a.Reservation != "" && mode == "new" {
		acq.ReservationBound = bound != nil && *bound
		acq.ReservationEnded = !acq.ReservationBound
	}
	if deadFor != nil {
		acq.TookOverDeadSession = true
		acq.DeadSessionFor = time.Duration(*deadFor * float64(time.Second))
	}
	return acq, nil
}

func nullSize(n int64) any {
	if n < 0 {
		return nil
	}
	return n
}

// Renew extends a live lease held by holder. false: it is no longer held
// (expired, taken over, or its session died): the holder must stop.
func (c *Catalog) Renew(ctx context.Context, bucket, key, holder string, ttl time.Duration) (bool, error) {
	tag, err := c.Pool.Exec(ctx, `UPDATE leases SET expires_at = clock_timestamp() + $4::interval
		WHERE bucket = $1 AND key = $2 AND holder = $3 AND `+liveLease, bucket, key, holder, ttl.String())
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Progress records that holder's write is moving bytes, if it still holds
// the key's lease.
func (c *Catalog) Progress(ctx context.Context, bucket, key, holder string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE leases SET progress_at = clock_timestamp()
		WHERE bucket = $1 AND key = $2 AND holder = $3 AND `+liveLease, bucket, key, holder)
	return err
}

// HolderProgressing reports whether the key's live lease holder recorded
// progress within the last `within`, on the database clock.
func (c *Catalog) HolderProgressing(ctx context.Context, bucket, key string, within time.Duration) (bool, error) {
	var ok bool
	err := c.Pool.QueryRow(ctx, `SELECT coalesce(bool_or(`+liveLease+`
			AND progress_at > clock_timestamp() - $3::interval), false)
		FROM leases WHERE bucket = $1 AND key = $2`, bucket, key, within.String()).Scan(&ok)
	return ok, err
}

// Release frees the lease if holder still has it and, in the same transaction,
// moves the holder's attempt from leased to its ending's state.
func (c *Catalog) Release(ctx context.Context, bucket, key, holder string, end lease.Ending) error {
	return pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE leases SET holder = NULL, expires_at = NULL, session = NULL
			WHERE bucket = $1 AND key = $2 AND holder = $3`, bucket, key, holder); err != nil {
			return err
		}
		if end.State == "" {
			return nil
		}
		// The state moves only from leased (a takeover may have made the
		// attempt unknown already); what it was sent with is recorded anyway.
		_, err := tx.Exec(ctx, `UPDATE attempts SET
				state = CASE WHEN state = 'leased' THEN $2 ELSE state END,
				reason = CASE WHEN state = 'leased' THEN nullif($3, '') ELSE reason END,
				-- updated_at is when the state last changed: an unknown
				-- attempt's horizon, and the generation it was fenced on,
				-- count from when it became unknown (docs/DESIGN.md, "When a
				-- guard ends").
				updated_at = CASE WHEN state = 'leased' THEN clock_timestamp() ELSE updated_at END,
				fence = coalesce($4, fence), checksum = coalesce(nullif($5, ''), checksum)
			WHERE attempt_id = $1`, holder, end.State, end.Reason, end.Fence, end.Checksum)
		return err
	})
}

// KeyState reads the catalog row, the unresolved attempts and the bucket's
// completeness for a key.
func (c *Catalog) KeyState(ctx context.Context, bucket, key string) (lease.KeyState, error) {
	var ks lease.KeyState
	b := &pgx.Batch{}
	queueKeyState(b, bucket, key, "", &ks)
	err := c.Pool.SendBatch(ctx, b).Close()
	return ks, err
}

// queueKeyState reads the key's catalog entry, its bucket's import state and
// its unresolved attempts into ks. Consistent without a snapshot: everything
// that changes these rows for the key happens under the key's lease, which the
// caller holds. holder, when not empty, is the attempt that lease was just
// given to in the same batch: it is live, so it is left out of the unresolved
// attempts without looking up its lease and session (a leases and a sessions
// probe per write, docs/COST.md). If its acquire failed the state is unused.
func queueKeyState(b *pgx.Batch, bucket, key, holder string, ks *lease.KeyState) {
	b.Queue(`SELECT generation, etag, size, attempt_id::text, deleted, origin, committed_at
		FROM catalog WHERE bucket = $1 AND key = $2`, bucket, key).QueryRow(func(row pgx.Row) error {
		var e lease.Entry
		var etag, attempt *string
		var size *int64
		err := row.Scan(&e.Generation, &etag, &size, &attempt, &e.Deleted, &e.Origin, &e.CommittedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err == nil {
			e.ETag, e.AttemptID, e.Size = deref(etag), deref(attempt), derefSize(size)
			ks.Entry = &e
		}
		return err
	})
	b.Queue(`SELECT coalesce((SELECT complete FROM buckets WHERE bucket = $1), false)`, bucket).QueryRow(func(row pgx.Row) error {
		return row.Scan(&ks.BucketComplete)
	})
	b.Queue(`SELECT `+attemptColumns+` FROM attempts a
		WHERE bucket = $1 AND key = $2 AND op <> 'multipart' AND attempt_id IS DISTINCT FROM $3::uuid
		  AND (state = 'unknown' OR (state = 'leased' AND `+holderGone+`))
		ORDER BY created_at`, bucket, key, nullID(holder)).Query(func(rows pgx.Rows) error {
		var err error
		ks.Unresolved, err = scanAttempts(rows, nil)
		return err
	})
}

// liveLease is the one liveness rule, for a row of leases (unqualified
// columns): a holder, its own expiry ahead, and its session (if it names one)
// alive: not ended, its expiry ahead. The rule is the SQL function
// fencegate_lease_live (migrations/0006_gateway_sessions.sql), which
// fencegate_acquire and fencegate_commit call too.
const liveLease = `fencegate_lease_live(holder, expires_at, session)`

// holderGone is true for an attempt row `a` whose holder no longer has a live
// lease on its key (it died, lost the lease, or its session died).
const holderGone = `NOT EXISTS (SELECT 1 FROM leases l WHERE l.bucket = a.bucket AND l.key = a.key
	AND l.holder = a.attempt_id AND fencegate_lease_live(l.holder, l.expires_at, l.session))`

const attemptColumns = `attempt_id::text, bucket, key, op, state, gateway, coalesce(declared_size, -1), coalesce(checksum, ''),
	coalesce(upload_id, ''), coalesce(upload_attempt::text, ''), coalesce(generation, 0), coalesce(etag, ''),
	extract(epoch FROM clock_timestamp() - CASE WHEN state = 'unknown' THEN coalesce(unknown_at, updated_at) ELSE updated_at END)::float8`

func scanAttempts(rows pgx.Rows, err error) ([]lease.Attempt, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease.Attempt, error) {
		var a lease.Attempt
		var age float64
		err := r.Scan(&a.ID, &a.Bucket, &a.Key, &a.Op, &a.State, &a.Gateway, &a.DeclaredSize, &a.Checksum, &a.UploadID, &a.UploadAttempt, &a.Generation, &a.ETag, &age)
		a.InState = time.Duration(age * float64(time.Second))
		return a, err
	})
}

// AttemptByID reads one attempt.
func (c *Catalog) AttemptByID(ctx context.Context, id string) (lease.Attempt, error) {
	as, err := scanAttempts(c.Pool.Query(ctx, `SELECT `+attemptColumns+` FROM attempts WHERE attempt_id = $1`, id))
	if err != nil {
		return lease.Attempt{}, err
	}
	if len(as) == 0 {
		return lease.Attempt{}, errNoAttempt
	}
	return as[0], nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefSize(n *int64) int64 {
	if n == nil {
		return -1
	}
	return *n
}

// Commit is the verified, locked commit (W5): it locks the key's lease row (the
// row a takeover locks), then checks in a later statement, on clock_timestamp(),
// that the caller still holds a live lease, so waiting for the lock never
// authorizes an expired writer. The generation, catalog row, history row,
// outbox event and attempt state are written together; unknown attempts of the
// key that this generation supersedes become failed when the holder's own write
// committed (its fence excluded them).
func (c *Catalog) Commit(ctx context.Context, p lease.CommitParams) (int64, error) {
	var gen *int64
	e := p.Entry
	err := c.call(ctx, &batchedCall{bucket: p.Bucket, key: p.Key, commit: true, notify: p.Bucket + "/" + p.Key, queue: func(b *pgx.Batch) {
		gen = nil
		b.Queue(`SELECT fencegate_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			p.Bucket, p.Key, p.Holder, nullID(p.Settled), p.SettledState, e.ETag, nullSize(e.Size), nullID(e.AttemptID),
			e.Deleted, e.Origin, p.Release).QueryRow(func(row pgx.Row) error { return row.Scan(&gen) })
	}})
	if err != nil {
		return 0, err
	}
	if gen == nil {
		return 0, lease.ErrLeaseLost
	}
	return *gen, nil
}

// CommitHandOver is Commit with the lease handed, in the same transaction,
// to next (a writer of the same gateway waiting for the key): next's attempt
// is recorded and leased, and next's key state read under it
// (migrations/0009_commit_hand_over.sql). The Acquired is nil when the lease
// was released instead: a writer of another gateway waits for the key (it is
// notified), or the commit found the lease lost (ErrLeaseLost).
func (c *Catalog) CommitHandOver(ctx context.Context, p lease.CommitParams, next lease.AcquireParams) (int64, *lease.Acquired, error) {
	var gen *int64
	var acquired *bool
	var ks *lease.KeyState
	e, a := p.Entry, next.Attempt
	err := c.call(ctx, &batchedCall{bucket: p.Bucket, key: p.Key, commit: true, notify: p.Bucket + "/" + p.Key, queue: func(b *pgx.Batch) {
		gen, acquired, ks = nil, nil, &lease.KeyState{}
		b.Queue(`SELECT generation, acquired FROM fencegate_commit_hand_over($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
				$11, $12::interval, $13, $14, $15, $16, $17, $18)`,
			p.Bucket, p.Key, p.Holder, nullID(p.Settled), p.SettledState, e.ETag, nullSize(e.Size), nullID(e.AttemptID), e.Deleted, e.Origin,
			a.ID, next.TTL.String(), a.Op, a.Gateway, nullSize(a.DeclaredSize), a.Checksum, nullID(a.UploadAttempt), nullID(next.Session)).
			QueryRow(func(row pgx.Row) error { return row.Scan(&gen, &acquired) })
		queueKeyState(b, p.Bucket, p.Key, a.ID, ks)
	}})
	if err != nil {
		return 0, nil, err
	}
	if gen == nil {
		return 0, nil, lease.ErrLeaseLost
	}
	if acquired == nil || !*acquired {
		return *gen, nil, nil
	}
	return *gen, &lease.Acquired{State: ks}, nil
}

// notifyOutbox wakes outbox consumers after a commit sent alone
// (notify.go); a batch's commits wake them in its transaction (batch.go).
func (c *Catalog) notifyOutbox(payload string) {
	c.notifyOnce.Do(func() { c.notifier = &outboxNotifier{pool: c.Pool} })
	c.notifier.notify(payload)
}

func nullID(id string) any {
	if id == "" {
		return nil
	}
	return id
}

// SetState moves an attempt between states outside a lease (multipart
// bookkeeping: open, aborted, failed).
func (c *Catalog) SetState(ctx context.Context, attemptID, from, to, reason string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts SET state = $3, reason = nullif($4, ''), updated_at = clock_timestamp()
		WHERE attempt_id = $1 AND state = $2`, attemptID, from, to, reason)
	return err
}

// RecordAttempt stores an attempt that takes no key lease (a multipart upload).
func (c *Catalog) RecordAttempt(ctx context.Context, a lease.Attempt) error {
	_, err := c.Pool.Exec(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, declared_size, checksum, upload_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, nullif($8, ''), nullif($9, ''))`,
		a.ID, a.Bucket, a.Key, a.Op, a.State, a.Gateway, nullSize(a.DeclaredSize), a.Checksum, a.UploadID)
	return err
}

// SetUploadID records the store's upload id for a multipart attempt.
func (c *Catalog) SetUploadID(ctx context.Context, attemptID, uploadID string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts SET upload_id = $2, updated_at = clock_timestamp() WHERE attempt_id = $1`, attemptID, uploadID)
	return err
}

// AttemptByUpload finds a multipart upload's attempt.
func (c *Catalog) AttemptByUpload(ctx context.Context, uploadID string) (lease.Attempt, error) {
	as, err := scanAttempts(c.Pool.Query(ctx, `SELECT `+attemptColumns+` FROM attempts WHERE upload_id = $1`, uploadID))
	if err != nil {
		return lease.Attempt{}, err
	}
	if len(as) == 0 {
		return lease.Attempt{}, errNoAttempt
	}
	return as[0], nil
}

// MarkBucket records a bucket; complete marks it as fully known to the catalog.
func (c *Catalog) MarkBucket(ctx context.Context, bucket string, complete bool) error {
	_, err := c.Pool.Exec(ctx, `INSERT INTO buckets (bucket, complete) VALUES ($1, $2)
		ON CONFLICT (bucket) DO UPDATE SET complete = EXCLUDED.complete`, bucket, complete)
	return err
}

// ForgetBucket drops a deleted bucket's completeness (its keys' history stays).
func (c *Catalog) ForgetBucket(ctx context.Context, bucket string) error {
	_, err := c.Pool.Exec(ctx, `DELETE FROM buckets WHERE bucket = $1`, bucket)
	return err
}

// ClaimUnresolved claims up to limit keys with unresolved attempts (unknown, or
// leased by a holder whose lease expired), oldest first, for claimFor: a claim
// token is stamped on their attempts (and a try counted) before any storage
// I/O, and SKIP LOCKED keeps concurrent reconcilers on different keys.
func (c *Catalog) ClaimUnresolved(ctx context.Context, limit int, claim lease.Claim, horizon time.Duration) ([][2]string, error) {
	token := lease.NewID()
	rows, err := c.Pool.Query(ctx, `WITH picked AS (
			SELECT attempt_id FROM attempts a
			WHERE op <> 'multipart' AND (state = 'unknown' OR (state = 'leased' AND `+holderGone+`))
			  AND `+unclaimed+`
			-- least recently tried first, so guards that cannot be proven yet do
			-- not starve newer ones
			ORDER BY coalesce(claimed_until, updated_at) LIMIT $1 FOR UPDATE SKIP LOCKED)
		-- A guard tried three times and still unproven (its bytes never showed
		-- up) is retried less and less often: up to 64 claims apart, but an
		-- unknown one never past its horizon by more than a claim period, so
		-- the settle that closes it comes soon after the horizon passes.
		UPDATE attempts a SET claim_token = $2, tries = tries + 1, claim_session = $5,
			-- (least ignores the NULL of a guard not before its horizon)
			claimed_until = clock_timestamp() + least($3::interval * power(2, greatest(least(a.tries, 8) - 2, 0)),
				CASE WHEN a.state = 'unknown' THEN nullif(greatest(coalesce(a.unknown_at, a.updated_at) + $4::interval - clock_timestamp(),
					interval '0'), interval '0') + $3::interval / 4 END)
		FROM picked WHERE a.attempt_id = picked.attempt_id
		RETURNING a.bucket, a.key`, limit, token, claim.For.String(), horizon.String(), nullSession(claim))
	if err != nil {
		return nil, err
	}
	seen := map[[2]string]bool{}
	var out [][2]string
	for rows.Next() {
		var k [2]string
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			rows.Close()
			return nil, err
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out, rows.Err()
}

// RetryKeyLater records why settling a claimed key did not happen (a store
// failure, a live writer holding it) and makes the key's unresolved attempts
// claimable again after a back-off: first, doubling per try, at most max
// (the claim period). Not the whole claim: a store down for a second would
// otherwise leave its guards unsettled for twice the lease TTL.
func (c *Catalog) RetryKeyLater(ctx context.Context, bucket, key string, first, max time.Duration, errText string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts SET last_error = $3, claim_session = NULL,
			claimed_until = clock_timestamp() + least($4::interval * power(2, least(greatest(tries - 1, 0), 20)), $5::interval)
		WHERE bucket = $1 AND key = $2 AND state IN ('leased', 'unknown')`,
		bucket, key, errText, first.String(), max.String())
	return err
}

// MarkDeadUnknown turns leased attempts of a key whose holders no longer hold
// a live lease (they died or lost it) into unknown guards.
func (c *Catalog) MarkDeadUnknown(ctx context.Context, bucket, key string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts a SET state = 'unknown', reason = 'lease expired', updated_at = clock_timestamp()
		WHERE bucket = $1 AND key = $2 AND state = 'leased' AND `+holderGone,
		bucket, key)
	return err
}

// CloseGuards ends unknown attempts of a key that can no longer land (their
// horizon has passed, lease/settle.go): failed, with reason, and the key's
// generation at the close recorded, after which they cannot have landed.
func (c *Catalog) CloseGuards(ctx context.Context, bucket, key string, ids []string, reason string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE attempts SET state = 'failed', reason = $4, updated_at = clock_timestamp(),
			generation = (SELECT generation FROM catalog WHERE bucket = $1 AND key = $2)
		WHERE bucket = $1 AND key = $2 AND attempt_id = ANY($3::uuid[]) AND state = 'unknown'`, bucket, key, ids, reason)
	return err
}

// errNoAttempt is a lookup that found no attempt: lease.ErrNotFound to the
// protocol, pgx.ErrNoRows to internal/wiring's tracker.
var errNoAttempt = fmt.Errorf("%w: %w", lease.ErrNotFound, pgx.ErrNoRows)
