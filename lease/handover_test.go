package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// Writers waiting for a key in one gateway get it in arrival order, each as
// soon as the one before it releases it: handed over, not found by a poll.
// The poll interval here is far longer than the whole test's hand-overs, so
// only the hand-over can explain them.
func TestHandOverInArrivalOrder(t *testing.T) {
	c := catalog(t)
	cfg := lease.Config{TTL: 30 * time.Second, RenewEvery: 5 * time.Second, Margin: 5 * time.Second,
		WaitMax: 20 * time.Second, WaitPoll: 10 * time.Second}
	m := lease.NewManager(cfg, c, nil)
	waiting := make(chan struct{}, 8)
	m.Hooks.Waiting = func(string, string) { waiting <- struct{}{} }
	ctx := context.Background()
	key := "handover-" + lease.NewID()
	req := lease.Request{Bucket: "b", Key: key, Op: "put", DeclaredSize: 1}
	holder, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		n  int
		l  *lease.Lease
		at time.Time
	}
	order := make(chan got, 3)
	for n := 1; n <= 3; n++ {
		go func() {
			l, err := m.Acquire(ctx, req)
			if err != nil {
				t.Error(err)
				return
			}
			order <- got{n, l, time.Now()}
		}()
		// Each writer is queued before the next one starts: the barrier is
		// the Waiting hook, called when it takes its place.
		select {
		case <-waiting:
		case <-time.After(20 * time.Second):
			t.Fatalf("writer %d never waited", n)
		}
	}
	released := time.Now()
	if _, err := holder.Commit(ctx, lease.Landed{ETag: "e0", Size: 1}); err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 3; want++ {
		select {
		case g := <-order:
			if g.n != want {
				t.Fatalf("writer %d got the key, want writer %d (arrival order)", g.n, want)
			}
			if d := g.at.Sub(released); d > 2*time.Second {
				t.Fatalf("writer %d got the key %s after the release: not handed over (poll is %s)", g.n, d, cfg.WaitPoll)
			}
			t.Logf("writer %d got the key %s after the release", g.n, g.at.Sub(released).Round(time.Millisecond))
			released = time.Now()
			g.l.Fail("released at once")
		case <-time.After(20 * time.Second):
			t.Fatalf("writer %d never got the key", want)
		}
	}
}

// handOverCounting counts a Manager's acquires (countingAcquires) and its
// hand-over commits.
type handOverCounting struct {
	countingAcquires
	handOvers, handed atomic.Int64
}

func (c *handOverCounting) CommitHandOver(ctx context.Context, p lease.CommitParams, next lease.AcquireParams) (int64, *lease.Acquired, error) {
	gen, acq, err := c.Catalog.CommitHandOver(ctx, p, next)
	c.handOvers.Add(1)
	if acq != nil {
		c.handed.Add(1)
	}
	return gen, acq, err
}

// The holder's commit hands the key to the writer of its gateway waiting
// for it, in the commit's transaction: the waiter asks the database once
// (refused) and is then the holder, its attempt leased, without an acquire
// of its own. If a writer of another gateway waits too (the row is marked
// with its gateway), the commit releases instead, and the local waiter asks
// again like anyone.
func TestCommitHandsTheKeyToTheNextWriter(t *testing.T) {
	for _, otherWaits := range []bool{false, true} {
		t.Run(map[bool]string{false: "handed", true: "another gateway waits"}[otherWaits], func(t *testing.T) {
			c := catalog(t)
			db := &handOverCounting{countingAcquires: countingAcquires{Catalog: c}}
			m := lease.NewManager(lease.Config{TTL: 30 * time.Second, WaitMax: 20 * time.Second, WaitPoll: 10 * time.Second}, db, nil)
			ctx := context.Background()
			req := lease.Request{Bucket: "b", Key: "hand-over-" + lease.NewID(), Op: "put", DeclaredSize: 1}
			holder, err := m.Acquire(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			next := make(chan *lease.Lease, 1)
			go func() {
				l, err := m.Acquire(ctx, req)
				if err != nil {
					t.Error(err)
				}
				next <- l
			}()
			// The barrier: the waiter asked once, was refused, and parked.
			for deadline := time.Now().Add(10 * time.Second); !m.ParkedHead(req.Bucket, req.Key); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the second writer never parked")
				}
			}
			if otherWaits {
				if _, err := c.Pool.Exec(ctx, `UPDATE leases SET wakeup = 'gw-other' WHERE bucket = $1 AND key = $2`, req.Bucket, req.Key); err != nil {
					t.Fatal(err)
				}
			}
			gen, err := holder.Commit(ctx, lease.Landed{ETag: "e1", Size: 1})
			if err != nil {
				t.Fatal(err)
			}
			var l *lease.Lease
			select {
			case l = <-next:
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter never got the key (its poll is 10 s)")
			}
			if l == nil {
				t.FailNow()
			}
			acquires, handOvers, handed := db.n.Load(), db.handOvers.Load(), db.handed.Load()
			wantAcquires, wantHanded := int64(2), int64(1) // the holder's, the waiter's refused one
			if otherWaits {
				// And the waiter's own after the release: refused while its
				// gateway yields the key to the other (lease.YieldFor), then
				// granted.
				wantAcquires, wantHanded = 3, 0
			}
			if acquires < wantAcquires || !otherWaits && acquires != wantAcquires || handOvers != 1 || handed != wantHanded {
				t.Errorf("acquires %d, hand-over commits %d, handed %d; want %d (at least, when another gateway waits), 1, %d",
					acquires, handOvers, handed, wantAcquires, wantHanded)
			}
			var holderID, state string
			if err := c.Pool.QueryRow(ctx, `SELECT l.holder::text, a.state FROM leases l JOIN attempts a ON a.attempt_id = l.holder
				WHERE l.bucket = $1 AND l.key = $2`, req.Bucket, req.Key).Scan(&holderID, &state); err != nil {
				t.Fatal(err)
			}
			if holderID != l.AttemptID || state != lease.StateLeased {
				t.Fatalf("the key's holder %s (%s), want the waiter's attempt %s leased", holderID, state, l.AttemptID)
			}
			gen2, err := l.Commit(ctx, lease.Landed{ETag: "e2", Size: 1})
			if err != nil || gen2 <= gen {
				t.Fatalf("the waiter's commit: generation %d after %d, %v", gen2, gen, err)
			}
		})
	}
}

// cancelBeforeHandOver cancels the claimed waiter's context and lets the
// hand-over commit go only once the waiter stopped to wait for it.
type cancelBeforeHandOver struct {
	*meta.Catalog
	m      *lease.Manager
	cancel context.CancelFunc
	t      *testing.T
}

func (c *cancelBeforeHandOver) CommitHandOver(ctx context.Context, p lease.CommitParams, next lease.AcquireParams) (int64, *lease.Acquired, error) {
	c.cancel()
	for deadline := time.Now().Add(10 * time.Second); !c.m.ClaimedHeadWaiting(p.Bucket, p.Key); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Error("the claimed waiter never stopped for the hand-over")
			break
		}
	}
	return c.Catalog.CommitHandOver(ctx, p, next)
}

// A waiter the commit claimed whose context ends before the hand-over
// arrives waits for it and gives the key back, its attempt failed: no
// lease is left that nobody holds, and the next writer takes the key at
// once.
func TestClaimedWaiterThatGivesUpReturnsTheKey(t *testing.T) {
	c := catalog(t)
	db := &cancelBeforeHandOver{Catalog: c, t: t}
	m := lease.NewManager(lease.Config{TTL: 30 * time.Second, WaitMax: 20 * time.Second, WaitPoll: 10 * time.Second}, db, nil)
	db.m = m
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "give-up-" + lease.NewID(), Op: "put", DeclaredSize: 1}
	holder, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	db.cancel = cancel
	gaveUp := make(chan error, 1)
	go func() {
		l, err := m.Acquire(wctx, req)
		if l != nil {
			err = errors.New("the waiter got a lease after its context ended")
		}
		gaveUp <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); !m.ParkedHead(req.Bucket, req.Key); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never parked")
		}
	}
	if _, err := holder.Commit(ctx, lease.Landed{ETag: "e1", Size: 1}); err != nil {
		t.Fatal(err)
	}
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter: %v, want context.Canceled", err)
	}
	var holderID *string
	var failed int
	if err := c.Pool.QueryRow(ctx, `SELECT holder::text, (SELECT count(*) FROM attempts WHERE bucket = $1 AND key = $2 AND state = 'failed')
		FROM leases WHERE bucket = $1 AND key = $2`, req.Bucket, req.Key).Scan(&holderID, &failed); err != nil {
		t.Fatal(err)
	}
	if holderID != nil || failed != 1 {
		t.Fatalf("after the waiter gave up: holder %v, failed attempts %d; want none, 1", holderID, failed)
	}
	next, err := m.Acquire(ctx, lease.Request{Bucket: req.Bucket, Key: req.Key, Op: "put", DeclaredSize: 1, NoWait: true})
	if err != nil {
		t.Fatalf("the next writer: %v", err)
	}
	next.Fail("done")
}
