package meta

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/notify"
)

// Targets is the notify service's queue (notify.Queue): the SQL of
// delivery, claims and dead letters (docs/NOTIFICATIONS.md).

// DeliveryTargets lists the targets with their secrets opened.
func (t *Targets) DeliveryTargets(ctx context.Context) ([]notify.Target, error) {
	all, err := t.All(ctx)
	out := make([]notify.Target, len(all))
	for i, tg := range all {
		out[i] = notify.Target{Name: tg.Name, Kind: tg.Kind, URL: tg.URL, Subject: tg.Subject, Secret: tg.Secret}
	}
	return out, err
}

// ClaimTarget takes the target's claim if it is free, expired or holder's
// own, and extends it to claimFor from now on PostgreSQL's clock. A holder is
// a gateway's session: a claim whose holder's session has ended or expired
// (the gateway stopped, crashed or lost PostgreSQL) is free at once. A holder
// that no session row names keeps the claim for its period.
func (t *Targets) ClaimTarget(ctx context.Context, target, holder string, claimFor time.Duration) (bool, error) {
	tag, err := t.Pool.Exec(ctx, `INSERT INTO notify_claims AS c (target, holder, claimed_until)
		VALUES ($1, $2, clock_timestamp() + $3::interval)
		ON CONFLICT (target) DO UPDATE SET holder = EXCLUDED.holder, claimed_until = EXCLUDED.claimed_until
		WHERE c.holder = EXCLUDED.holder OR `+targetClaimFree,
		target, holder, claimFor.String())
	return err == nil && tag.RowsAffected() == 1, err
}

// targetClaimFree is true of a notify_claims row aliased c that another
// holder may take: its period ran out, or its holder's session ended or
// expired.
const targetClaimFree = `(c.claimed_until < clock_timestamp()
	OR EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = c.holder AND NOT ` + sessionLive + `))`

// ReleaseTarget gives the claim up, so another gateway need not wait for it
// to expire.
func (t *Targets) ReleaseTarget(ctx context.Context, target, holder string) error {
	_, err := t.Pool.Exec(ctx, `DELETE FROM notify_claims WHERE target = $1 AND holder = $2`, target, holder)
	return err
}

// Due reads the first queued event of each key whose first event is due, in
// queue order, at most limit of them. A round sends one event per key (the
// next only after this one's acknowledgement is recorded), so reading a
// key's later events would only fill the batch: a key with many queued
// events would hold every other key back for as many rounds. A key whose
// first event waits for its retry gives nothing: its events go out in
// generation order. The due test reads one instant, statement_timestamp():
// with clock_timestamp(), read anew per row, the rows of one statement would
// disagree on what is due (seen, and fixed, in TestNotifyWebhookFlakyReceiver).
func (t *Targets) Due(ctx context.Context, target string, limit int) ([]notify.Event, error) {
	rows, err := t.Pool.Query(ctx, `SELECT q.id, q.outbox_id, q.event_name, q.bucket, q.key, q.generation,
			coalesce(q.etag, ''), coalesce(q.size, 0), coalesce(q.attempt_id::text, ''), q.committed_at, q.tries
		FROM notify_queue q
		WHERE q.target = $1 AND q.next_at <= statement_timestamp()
		  AND NOT EXISTS (SELECT 1 FROM notify_queue p WHERE p.target = q.target AND p.bucket = q.bucket AND p.key = q.key
		                  AND p.id < q.id)
		ORDER BY q.id LIMIT $2`, target, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (notify.Event, error) {
		e := notify.Event{Target: target}
		err := r.Scan(&e.QueueID, &e.OutboxID, &e.Name, &e.Bucket, &e.Key, &e.Generation, &e.ETag, &e.Size, &e.AttemptID, &e.CommittedAt, &e.Tries)
		return e, err
	})
}

// Delivered removes acknowledged events from their queue, in one statement.
func (t *Targets) Delivered(ctx context.Context, queueIDs []int64) error {
	_, err := t.Pool.Exec(ctx, `DELETE FROM notify_queue WHERE id = ANY($1)`, queueIDs)
	return err
}

// Retry counts a failed try and makes the event due again after a back-off.
func (t *Targets) Retry(ctx context.Context, queueID int64, after time.Duration, errText string) error {
	_, err := t.Pool.Exec(ctx, `UPDATE notify_queue SET tries = tries + 1, next_at = clock_timestamp() + $2::interval, last_error = $3
		WHERE id = $1`, queueID, after.String(), errText)
	return err
}

// DeadLetter moves an event out of its queue into the dead letters.
func (t *Targets) DeadLetter(ctx context.Context, queueID int64, errText string) error {
	_, err := t.Pool.Exec(ctx, `WITH q AS (DELETE FROM notify_queue WHERE id = $1 RETURNING *)
		INSERT INTO notify_dead_letters (id, target, outbox_id, event_name, bucket, key, generation, etag, size, attempt_id, committed_at, tries, last_error)
		SELECT id, target, outbox_id, event_name, bucket, key, generation, etag, size, attempt_id, committed_at, tries + 1, $2 FROM q`, queueID, errText)
	return err
}

// Backlog gives each target's queue, dead letters and lag.
func (t *Targets) Backlog(ctx context.Context) (map[string]notify.Backlog, error) {
	c, err := t.Counts(ctx)
	out := make(map[string]notify.Backlog, len(c))
	for name, x := range c {
		out[name] = notify.Backlog{Queued: x.Queued, DeadLetters: x.DeadLetters, Lag: x.Lag}
	}
	return out, err
}

var _ notify.Queue = (*Targets)(nil)
