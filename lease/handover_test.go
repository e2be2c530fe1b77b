package lease_test

import (
	"context"
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
	key := "handover-" + meta.NewID()
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
