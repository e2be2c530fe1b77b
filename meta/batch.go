package meta

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Group commit for the write protocol's two durable calls, Acquire and
// Commit. A call goes to PostgreSQL at once when none of this catalog's is in
// flight; calls that come while one is in flight wait, and go together in
// the next round trip, in one transaction (one WAL flush, one commit
// record); if the batch in flight takes longer than stuckBatch, they go
// beside it. A lone writer waits for nothing; under load, one transaction
// carries many writers' calls: measured with 32 writers on their own keys
// (meta/cost_measure_test.go), PostgreSQL CPU per write fell from 2.4 ms to
// 0.7 ms.
//
// While many of the gateway's writes hold leases (at least gatherSiblings,
// as the catalog's WritesInFlight says), each of them will send its commit
// within a store round trip, so a batch waits up to gatherWait for more
// calls (gatherTarget at most) before it goes: fewer, larger transactions
// (docs/COST.md, "Group commit that waits for its siblings"). A lone writer,
// a few writers, and a hot key's chain (one holder at a time) never wait.
//
// A batch's calls share a transaction, so:
//   - they lock lease rows in one total order, (bucket, key) and on one key
//     a commit before an acquire, so two gateways' batches never deadlock on
//     each other;
//   - an error PostgreSQL reports rolls the whole batch back; then each call
//     is sent again on its own, so one bad call fails alone. A lost
//     connection fails them all, as it would have failed each alone (a
//     commit's outcome is then unknown, as before);
//   - a call whose context ended before its batch was sent is not sent; once
//     sent, its caller waits for the answer (bounded by the batch's deadline,
//     the latest of its calls'), so no lease is taken that nobody holds.

// maxBatch bounds the calls in one round trip.
const maxBatch = 64

// A batch waits for more calls, up to gatherWait or until gatherTarget are
// queued, while at least gatherSiblings writes hold leases (see above).
const (
	gatherSiblings = 8
	gatherWait     = 2 * time.Millisecond
	gatherTarget   = 16
)

// defaultCallTimeout bounds a batch whose calls have no deadline.
const defaultCallTimeout = 5 * time.Second

// batchedCall is one Acquire or Commit waiting for, or in, a batch.
type batchedCall struct {
	ctx         context.Context
	bucket, key string
	commit      bool // a commit: before an acquire of the same key
	// notify is the outbox wake-up the call's commit sends (its payload),
	// in its batch's transaction, or after it when sent alone (notify.go).
	notify string
	// queue adds the call's statements to b; their callbacks fill its
	// results, which queue resets first (a batch may be sent again).
	queue func(b *pgx.Batch)
	err   error
	done  chan struct{}
	lead  chan struct{} // this call's caller sends the next batch
	taken bool          // in a batch (under writeBatcher.mu)
}

// writeBatcher is a queue of calls for the next batch: a catalog's Acquires
// and Commits, or Reservations' creates (reservations.go).
type writeBatcher struct {
	// pool is where batches go, afterCommit (if set) what wakes the outbox
	// after a commit's batch; both set by the batcher's owner before its
	// first call.
	pool        *pgxpool.Pool
	afterCommit func(payload string)

	// siblings, if set, says how many writes hold leases now (the
	// catalog's WritesInFlight): at gatherSiblings or more a batch waits
	// for their calls.
	siblings func() int

	mu       sync.Mutex
	inFlight int // batches sent and not yet answered
	queued   []*batchedCall
	// gatherFull, while a batch waits for more calls, is closed when
	// enough are queued.
	gatherFull chan struct{}

	// Counters, for tests and measurements.
	calls, batches, resent int64
	gathered               int64 // batches that waited for more calls
	// beforeSend, if set, is called with each batch's size before it is
	// sent (a test hook; it may block to hold the batch).
	beforeSend func(n int)
	stuckAfter time.Duration // 0: stuckBatch (tests change it)
	// gatherAfter and gatherUpTo: 0 is gatherWait and gatherTarget (tests
	// change them).
	gatherAfter time.Duration
	gatherUpTo  int
}

// BatchStats reports how many calls went to PostgreSQL in how many batches,
// and how many were sent again alone after their batch failed.
func (c *Catalog) BatchStats() (calls, batches, resent int64) {
	c.writes.mu.Lock()
	defer c.writes.mu.Unlock()
	return c.writes.calls, c.writes.batches, c.writes.resent
}

// call runs one Acquire or Commit in the next batch and waits for its end.
func (c *Catalog) call(ctx context.Context, bc *batchedCall) error {
	c.writesOnce.Do(func() {
		c.writes.pool, c.writes.afterCommit, c.writes.siblings = c.Pool, c.notifyOutbox, c.WritesInFlight
	})
	if c.SingleCalls {
		return c.writes.sendAlone(ctx, bc)
	}
	return c.writes.call(ctx, bc)
}

// call runs one call in the next batch and waits for its end.
func (w *writeBatcher) call(ctx context.Context, bc *batchedCall) error {
	bc.ctx, bc.done, bc.lead = ctx, make(chan struct{}), make(chan struct{}, 1)
	w.mu.Lock()
	w.queued = append(w.queued, bc)
	if w.gatherFull != nil && w.gatheredEnough() {
		close(w.gatherFull)
		w.gatherFull = nil
	}
	lead := w.inFlight == 0
	if lead {
		w.inFlight++
	}
	w.mu.Unlock()
	if lead {
		// Nothing was in flight: this call leads the next batch, which
		// holds it (unless another call went beside a slow leader first).
		w.sendQueued()
		<-bc.done
		return bc.err
	}
	stuckAfter := cmp.Or(w.stuckAfter, stuckBatch)
	stuck := time.NewTimer(stuckAfter)
	defer stuck.Stop()
	for {
		if lead {
			w.sendQueued()
			lead = false
		}
		select {
		case <-bc.done:
			return bc.err
		case <-bc.lead:
			lead = true
		case <-stuck.C:
			// The batch in flight is slow (a row lock, a stalled
			// server): this call and those queued with it go beside it.
			w.mu.Lock()
			select {
			case <-bc.lead:
				lead = true
			default:
				if lead = !bc.taken; lead {
					w.inFlight++
				}
			}
			w.mu.Unlock()
			stuck.Reset(stuckAfter)
		}
	}
}

// stuckBatch is how long a call waits for the batch in flight before it
// goes in a batch beside it: far above a batch's usual round trip (1-10 ms
// here), so batching holds under load, while one batch stuck on a row lock
// delays the gateway's other writes by this much at most.
const stuckBatch = 100 * time.Millisecond

// sendQueued sends the first maxBatch queued calls as one batch, then, if
// no other batch is in flight, hands the lead to the first call still
// queued.
func (w *writeBatcher) sendQueued() {
	w.gather()
	w.mu.Lock()
	n := min(len(w.queued), maxBatch)
	batch := slices.Clone(w.queued[:n])
	w.queued = slices.Delete(w.queued, 0, n)
	for _, bc := range batch {
		bc.taken = true
	}
	hook := w.beforeSend
	w.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	w.sendBatch(batch)
	w.mu.Lock()
	w.inFlight--
	if len(w.queued) > 0 && w.inFlight == 0 {
		w.inFlight++
		w.queued[0].lead <- struct{}{}
	}
	w.mu.Unlock()
}

// gather waits, before a batch is taken from the queue, for more calls
// while many writes hold leases: until enough are queued or gatherWait has
// passed.
func (w *writeBatcher) gather() {
	if w.siblings == nil || w.siblings() < gatherSiblings {
		return
	}
	w.mu.Lock()
	if w.gatheredEnough() {
		w.mu.Unlock()
		return
	}
	full := make(chan struct{})
	w.gatherFull = full
	w.gathered++
	w.mu.Unlock()
	t := time.NewTimer(cmp.Or(w.gatherAfter, gatherWait))
	select {
	case <-full:
	case <-t.C:
	}
	t.Stop()
	w.mu.Lock()
	if w.gatherFull == full {
		w.gatherFull = nil
	}
	w.mu.Unlock()
}

// gatheredEnough: the queue holds as many calls as a batch waits for
// (under mu).
func (w *writeBatcher) gatheredEnough() bool {
	return len(w.queued) >= cmp.Or(w.gatherUpTo, gatherTarget)
}

func (w *writeBatcher) sendBatch(calls []*batchedCall) {
	defer func() {
		for _, bc := range calls {
			close(bc.done)
		}
	}()
	var live []*batchedCall
	var deadline time.Time
	for _, bc := range calls {
		if err := bc.ctx.Err(); err != nil {
			bc.err = err // never sent
			continue
		}
		d, ok := bc.ctx.Deadline()
		if !ok {
			d = time.Now().Add(defaultCallTimeout)
		}
		if d.After(deadline) {
			deadline = d
		}
		live = append(live, bc)
	}
	if len(live) == 0 {
		return
	}
	slices.SortStableFunc(live, func(a, b *batchedCall) int {
		return cmp.Or(cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.key, b.key), -cmpBool(a.commit, b.commit))
	})
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	b := &pgx.Batch{}
	var wakeups []string
	for _, bc := range live {
		bc.queue(b)
		if bc.notify != "" {
			wakeups = append(wakeups, bc.notify)
		}
	}
	err := w.pool.SendBatch(ctx, b).Close()
	if err == nil && w.afterCommit != nil {
		// The batch's commits wake outbox consumers after it, never inside
		// its transaction: a full notification queue fails a transaction
		// that NOTIFYs at its commit, and a wake-up must cost latency at
		// most, never a write (notify.go).
		for _, p := range wakeups {
			w.afterCommit(p)
		}
	}
	w.mu.Lock()
	w.calls += int64(len(live))
	w.batches++
	// Only an ERROR rolls the batch back for sure. A FATAL or PANIC ends the
	// connection, possibly after the commit: resent, a settle's commit
	// (which releases nothing) would be made twice, a second generation and
	// outbox event for one settle. Its calls' outcome is unknown, as a lost
	// connection's is.
	var pgErr *pgconn.PgError
	resend := err != nil && len(live) > 1 && errors.As(err, &pgErr) && pgErr.Severity == "ERROR"
	if resend {
		w.resent += int64(len(live))
	}
	w.mu.Unlock()
	if !resend {
		for _, bc := range live {
			bc.err = err
		}
		return
	}
	// PostgreSQL reported an ERROR, so the batch's implicit transaction did
	// not commit, and each call goes again on its own.
	for _, bc := range live {
		if bc.err = bc.ctx.Err(); bc.err == nil {
			bc.err = w.sendAlone(bc.ctx, bc)
		}
	}
}

// sendAlone sends one call in a transaction of its own, and its commit's
// outbox wake-up after it (notify.go).
func (w *writeBatcher) sendAlone(ctx context.Context, bc *batchedCall) error {
	b := &pgx.Batch{}
	bc.queue(b)
	err := w.pool.SendBatch(ctx, b).Close()
	if err == nil && bc.notify != "" && w.afterCommit != nil {
		w.afterCommit(bc.notify)
	}
	return err
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}
