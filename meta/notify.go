package meta

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// outboxChannel is the channel consumers LISTEN on (docs/OUTBOX.md).
const outboxChannel = "fencegate_outbox"

// outboxNotifier wakes outbox consumers after commits, outside the
// committing transactions, batched or not (batch.go). Inside, a full
// notification queue (a consumer that LISTENs while idle in a transaction
// keeps PostgreSQL from truncating it) would fail every commit at its end,
// and the write would stay unknown. And a NOTIFY inside a transaction makes PostgreSQL take one
// database-wide lock from before its commit record to its end, so every
// notifying commit waits for the previous one's WAL flush: measured here with
// fsync on, 32 writers committed 9,500 transactions/s without it and 900/s with.
// Notifications are wake-ups, not events (consumers also poll), so one lost in
// a crash costs at most a poll. Sending them takes a transaction of its own,
// with an id but committed without waiting for its WAL flush; paced (below),
// a gateway writing steadily sends one every 5 ms instead of one per commit
// round (docs/COST.md).
type outboxNotifier struct {
	pool    *pgxpool.Pool
	mu      sync.Mutex
	pending []string
	sending bool         // a sender goroutine is running
	sends   atomic.Int64 // statements sent (for tests)
}

// outboxNotifyEvery paces the wake-ups: one statement at most per interval
// (the first after an idle spell at once), carrying every payload queued
// meanwhile.
const outboxNotifyEvery = 5 * time.Millisecond

// maxPendingNotifications bounds what waits while PostgreSQL is slow; beyond
// it, wake-ups are dropped (consumers poll anyway).
const maxPendingNotifications = 10000

// notify queues a wake-up with payload; one sender goroutine sends what has
// queued in one statement, at most one per outboxNotifyEvery, and exits when
// nothing is left.
func (n *outboxNotifier) notify(payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.pending) < maxPendingNotifications {
		n.pending = append(n.pending, payload)
	}
	if !n.sending {
		n.sending = true
		go n.send()
	}
}

func (n *outboxNotifier) send() {
	var last time.Time
	for {
		// Paced: commits that come meanwhile share the next statement, so a
		// gateway writing steadily sends one every outboxNotifyEvery, not
		// one per batch of commits (each is a transaction with an id).
		if !last.IsZero() {
			time.Sleep(time.Until(last.Add(outboxNotifyEvery)))
		}
		n.mu.Lock()
		batch := n.pending
		n.pending = nil
		if len(batch) == 0 {
			n.sending = false
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		last = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// PostgreSQL folds identical notifications of one transaction into
		// one, so a key written again meanwhile wakes consumers once.
		// Queueing them takes a transaction id, so the commit would wait for
		// a WAL flush: a wake-up is not worth one (synchronous_commit off,
		// for this transaction only).
		n.sends.Add(1)
		_, _ = n.pool.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, p)
			FROM unnest($2::text[]) AS p`, outboxChannel, batch)
		cancel()
	}
}
