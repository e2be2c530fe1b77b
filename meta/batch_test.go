package meta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
)

// holdBatches makes w's batch sender (a catalog's, or Reservations'
// creates') stop before each send until the test lets it go; sends reports
// each batch's size as it stops.
func holdBatches(w *writeBatcher) (sends chan int, release func()) {
	sends = make(chan int, 16)
	gate := make(chan struct{})
	w.stuckAfter = time.Minute // held batches are not stuck ones here
	w.beforeSend = func(n int) {
		sends <- n
		<-gate
	}
	var once sync.Once
	return sends, func() { once.Do(func() { close(gate) }) }
}

// queuedCalls is how many calls wait for w's next batch.
func queuedCalls(w *writeBatcher) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queued)
}

func waitQueued(t *testing.T, w *writeBatcher, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); queuedCalls(w) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queuedCalls(w), n)
		}
	}
}

// leaseWriters is how many transactions wrote bucket's lease rows (their
// xmin): counted on the rows, not on the cluster's transaction counter,
// which other packages' tests sharing the cluster advance meanwhile.
func leaseWriters(t *testing.T, c *Catalog, bucket string) int {
	t.Helper()
	var n int
	if err := c.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT xmin::text) FROM leases WHERE bucket = $1`, bucket).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func writeTxns(t *testing.T, c *Catalog) int64 {
	t.Helper()
	var n int64
	if err := c.Pool.QueryRow(context.Background(), `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A lone call goes at once; calls that come while a batch is in flight go
// together in the next one, in one transaction. The first batch is held
// before it is sent while three more writers come: they wait in the queue,
// and all three go in the second batch.
func TestCallsInFlightMeanwhileShareOneTransaction(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	b := testenv.RandomHex(6)
	sends, release := holdBatches(&c.writes)
	defer release()
	var wg sync.WaitGroup
	got := make([]bool, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, got[i] = acquire(t, c, b, fmt.Sprint("k", i), "gw", false)
		}()
		if i == 0 {
			if n := <-sends; n != 1 {
				t.Fatalf("the first batch has %d calls, want 1 (sent at once)", n)
			}
		}
	}
	waitQueued(t, &c.writes, 3)
	release()
	if n := <-sends; n != 3 {
		t.Fatalf("the second batch has %d calls, want the 3 that came meanwhile", n)
	}
	wg.Wait()
	for i, ok := range got {
		if !ok {
			t.Errorf("writer %d did not get its free key", i)
		}
	}
	calls, batches, resent := c.BatchStats()
	if calls != 4 || batches != 2 || resent != 0 {
		t.Errorf("calls %d, batches %d, resent %d; want 4, 2, 0", calls, batches, resent)
	}
	if n := leaseWriters(t, c, b); n != 2 {
		t.Errorf("the 4 acquires' lease rows were written by %d transactions, want 2 (one per batch)", n)
	}
}

// A call PostgreSQL refuses rolls its batch back; every call is then sent
// again alone, so only the bad one fails. The bad one reuses an attempt id
// (a unique violation), batched with a good writer on another key.
func TestRefusedCallFailsAlone(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	b := testenv.RandomHex(6)
	used, ok := acquire(t, c, b, "first", "gw", false)
	if !ok {
		t.Fatal("no lease on a free key")
	}
	sends, release := holdBatches(&c.writes)
	defer release()
	blocker := make(chan error, 1)
	go func() { // holds the sender while the two others queue
		_, err := c.Acquire(context.Background(), lease.AcquireParams{Bucket: b, Key: "blocker", TTL: time.Minute,
			Attempt: lease.Attempt{ID: lease.NewID(), Op: "put", Gateway: "gw", DeclaredSize: 1}})
		blocker <- err
	}()
	<-sends
	errs := make(chan error, 2)
	for _, p := range []lease.AcquireParams{
		{Bucket: b, Key: "good", TTL: time.Minute, Attempt: lease.Attempt{ID: lease.NewID(), Op: "put", Gateway: "gw", DeclaredSize: 1}},
		{Bucket: b, Key: "bad", TTL: time.Minute, Attempt: lease.Attempt{ID: used, Op: "put", Gateway: "gw", DeclaredSize: 1}},
	} {
		go func() {
			_, err := c.Acquire(context.Background(), p)
			if p.Key == "good" && err != nil {
				err = fmt.Errorf("the good writer failed: %w", err)
			}
			if p.Key == "bad" {
				if err == nil {
					err = errors.New("a reused attempt id was accepted")
				} else {
					err = nil
				}
			}
			errs <- err
		}()
	}
	waitQueued(t, &c.writes, 2)
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if err := <-blocker; err != nil {
		t.Fatal(err)
	}
	if _, _, resent := c.BatchStats(); resent != 2 {
		t.Errorf("%d calls sent again alone, want 2", resent)
	}
	var state string
	if err := c.Pool.QueryRow(context.Background(), `SELECT a.state FROM attempts a JOIN leases l ON l.holder = a.attempt_id
		WHERE l.bucket = $1 AND l.key = 'good'`, b).Scan(&state); err != nil || state != lease.StateLeased {
		t.Errorf("the good writer's attempt: %q, %v; want leased", state, err)
	}
}

// Two gateways' batches that name the same keys in opposite orders lock
// their lease rows in one order, so neither deadlocks (PostgreSQL would
// abort one after deadlock_timeout and its calls would be sent again
// alone). Gateway A queues x, z, y and B y, z, x; the test holds z's lease
// row locked until both batches wait on a lock, so in arrival order A would
// hold x and B y, each then waiting for the other's.
func TestBatchesOfTwoGatewaysDoNotDeadlock(t *testing.T) {
	pool := migratedPool(t)
	ctx := context.Background()
	b := testenv.RandomHex(6)
	gws := []*Catalog{{Pool: pool}, {Pool: pool}}
	if _, ok := acquire(t, gws[0], b, "z", "gw-z", false); !ok {
		t.Fatal("no lease on a free key")
	}
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `SELECT 1 FROM leases WHERE bucket = $1 AND key = 'z' FOR UPDATE`, b); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var releases []func()
	for g, c := range gws {
		sends, release := holdBatches(&c.writes)
		releases = append(releases, release)
		defer release()
		// A first call holds the sender while the keys queue in this
		// gateway's order.
		wg.Add(1)
		go func() { defer wg.Done(); acquire(t, c, b, fmt.Sprint("hold", g), "gw", false) }()
		<-sends
		keys := []string{"x", "z", "y"}
		if g == 1 {
			keys = []string{"y", "z", "x"}
		}
		for i, k := range keys {
			wg.Add(1)
			go func() { defer wg.Done(); acquire(t, c, b, k, fmt.Sprint("gw", g), false) }()
			waitQueued(t, &c.writes, i+1)
		}
		go func() {
			for range sends {
			}
		}()
	}
	for _, r := range releases {
		r()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d batches wait on a lock, want both", waiting)
		}
	}
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for g, c := range gws {
		if _, _, resent := c.BatchStats(); resent != 0 {
			t.Errorf("gateway %d sent %d calls again alone: its batch was aborted (a deadlock)", g, resent)
		}
	}
	var holders int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM leases WHERE bucket = $1 AND key IN ('x', 'y') AND holder IS NOT NULL`, b).Scan(&holders); err != nil || holders != 2 {
		t.Errorf("%d of x and y leased (%v), want both", holders, err)
	}
}

// A call does not wait behind a batch that is stuck (a row lock, a stalled
// server) for longer than stuckBatch: it goes in a batch beside it. The
// first batch is held past that; a writer on another key that comes
// meanwhile gets its key while the first is still held.
func TestCallGoesBesideAStuckBatch(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	b := testenv.RandomHex(6)
	sends, release := holdBatches(&c.writes)
	defer release()
	c.writes.stuckAfter = 50 * time.Millisecond
	first := make(chan bool, 1)
	go func() { _, ok := acquire(t, c, b, "stuck", "gw", false); first <- ok }()
	<-sends // the first batch is held from here until release
	second := make(chan bool, 1)
	go func() { _, ok := acquire(t, c, b, "other", "gw", false); second <- ok }()
	// The second batch stops at the hook too: it was sent beside the held one.
	select {
	case n := <-sends:
		if n != 1 {
			t.Fatalf("the batch beside the held one has %d calls, want 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second writer waited behind the held batch")
	}
	select {
	case <-first:
		t.Fatal("the held batch was answered before its release")
	default:
	}
	release()
	if !<-first || !<-second {
		t.Fatal("a writer did not get its free key")
	}
	if _, batches, _ := c.BatchStats(); batches != 2 {
		t.Fatalf("%d batches, want 2", batches)
	}
}
