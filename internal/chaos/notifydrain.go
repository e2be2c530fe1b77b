package chaos

import (
	"context"
	"fmt"
	"time"
)

// drainLimit bounds the wait, after the faults, for the gateways to deliver
// every event committed until then.
const drainLimit = 3 * time.Minute

// finishNotifications brings both targets back, waits (bounded) until the
// gateways have delivered every event committed so far, and holds what each
// target received to what the outbox recorded (checkNotifications).
func (c *Campaign) finishNotifications(ctx context.Context, db *catalog, rep *Report) []string {
	n := c.notify
	var problems []string
	n.hook.setHang(false)
	if err := n.hook.start(); err != nil {
		problems = append(problems, err.Error())
	}
	if err := n.nats.start(); err != nil {
		problems = append(problems, err.Error())
	}
	// Events up to the outbox's last id now must all arrive; any committed
	// later (the reconciler recording a write found at the store) may still
	// be on its way, but must be a committed event if it arrived.
	var mustBy int64
	if err := db.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM outbox`).Scan(&mustBy); err != nil {
		return append(problems, "notifications: "+err.Error())
	}
	began, lastSaid := time.Now(), time.Time{}
	if err := waitUntil(ctx, drainLimit, func() error {
		var left, keys, most int
		if err := db.pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0)::bigint, count(*), coalesce(max(n), 0)
			FROM (SELECT count(*) AS n FROM notify_queue WHERE outbox_id <= $1 GROUP BY target, bucket, key) q`,
			mustBy).Scan(&left, &keys, &most); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		// How the drain goes, every 10 s: a slow one says whether it is
		// one key's long queue or all of them.
		if time.Since(lastSaid) >= 10*time.Second {
			lastSaid = time.Now()
			c.logf("notifications: %s after the workload, %d events queued on %d keys, at most %d on one", time.Since(began).Round(time.Second), left, keys, most)
		}
		return fmt.Errorf("%d events still queued", left)
	}); err != nil {
		problems = append(problems, fmt.Sprintf("notifications: the queues did not drain in %s: %v", drainLimit, err))
		c.logQueueHeads(ctx, db)
	}
	c.logf("notification queues drained in %s", time.Since(began).Round(100*time.Millisecond))
	dead := map[string]int{}
	rows, err := db.pool.Query(ctx, `SELECT target, count(*) FROM notify_dead_letters GROUP BY target`)
	if err != nil {
		return append(problems, "notifications: "+err.Error())
	}
	for rows.Next() {
		var t string
		var k int
		if err := rows.Scan(&t, &k); err != nil {
			rows.Close()
			return append(problems, "notifications: "+err.Error())
		}
		dead[t] = k
	}
	rows.Close()

	hookGot, badSig, bad := n.hook.events()
	natsGot, err := n.nats.events(ctx)
	if err != nil {
		problems = append(problems, "notifications: reading the NATS stream: "+err.Error())
	}
	for _, b := range bad {
		problems = append(problems, "notifications: the webhook got a body that is not one event: "+b)
	}
	for _, t := range []struct {
		name, kind string
		events     []targetEvents
		got        []receivedEvent
	}{
		{webhookTarget, "webhook", webhookEvents, hookGot},
		{natsTarget, "nats", natsEvents, natsGot},
	} {
		all, err := db.committedEvents(ctx)
		if err != nil {
			problems = append(problems, "notifications: "+err.Error())
			continue
		}
		var committed []committedEvent
		for _, e := range all {
			if wants(t.events, e) {
				committed = append(committed, e)
			}
		}
		res, found := checkNotifications(t.name, t.kind, committed, mustBy, t.got)
		res.DeadLetters = dead[t.name]
		if t.kind == "webhook" {
			res.BadSig = badSig
			if badSig > 0 {
				found = append(found, fmt.Sprintf("notifications to %s: %d requests without a valid %s", t.name, badSig, signatureHeader))
			}
		}
		if res.DeadLetters > 0 {
			found = append(found, fmt.Sprintf("notifications to %s: %d events dead-lettered (the campaign's gateways never give up)", t.name, res.DeadLetters))
		}
		rep.Notifications = append(rep.Notifications, res)
		c.logf("notifications: %s", res)
		problems = append(problems, found...)
	}
	return problems
}

// committedEvents is every event the outbox recorded for the campaign's
// buckets, with its write's operation where its attempt is still there.
func (c *catalog) committedEvents(ctx context.Context) ([]committedEvent, error) {
	rows, err := c.pool.Query(ctx, `SELECT o.id, o.bucket, o.key, o.generation, o.deleted, coalesce(a.op, '')
		FROM outbox o LEFT JOIN attempts a ON a.attempt_id = o.attempt_id
		WHERE o.bucket = ANY($1) ORDER BY o.id`, campaignBuckets)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []committedEvent
	for rows.Next() {
		var e committedEvent
		if err := rows.Scan(&e.ID, &e.Bucket, &e.Key, &e.Gen, &e.Deleted, &e.Op); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// logQueueHeads writes, for a queue that did not drain, the first queued
// rows of each key still waiting (all of them, due or not, whatever their
// outbox id), so the report says what held the key: a retry far off, a row
// ahead of it, the last error.
func (c *Campaign) logQueueHeads(ctx context.Context, db *catalog) {
	rows, err := db.pool.Query(ctx, `SELECT target, bucket, key, id, outbox_id, generation, tries,
			round(extract(epoch FROM next_at - clock_timestamp())::numeric, 3), coalesce(left(last_error, 160), '')
		FROM (SELECT q.*, row_number() OVER (PARTITION BY target, bucket, key ORDER BY id) AS n FROM notify_queue q) h
		WHERE n <= 3 ORDER BY target, bucket, key, id LIMIT 60`)
	if err != nil {
		c.logf("notifications: reading the queues' heads: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var target, bucket, key, lastErr string
		var id, outboxID, gen int64
		var tries int
		var dueIn float64
		if err := rows.Scan(&target, &bucket, &key, &id, &outboxID, &gen, &tries, &dueIn, &lastErr); err != nil {
			c.logf("notifications: reading the queues' heads: %v", err)
			return
		}
		c.logf("notifications: still queued for %s: %s/%s queue id %d, outbox id %d, generation %d, %d tries, due in %.3f s, last error %q",
			target, bucket, key, id, outboxID, gen, tries, dueIn, lastErr)
	}
}
