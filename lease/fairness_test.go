package lease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// A hot key that one gateway's writers hand each other keeps no other
// gateway waiting past a bound, with no release listener anywhere (as
// behind a transaction-mode pooler, --lease-listen=false): a waiter of
// gateway B marks the key whether or not it listens, A's next commit then
// releases instead of handing over, and A's writers yield the free key to
// the others for lease.YieldFor (issue 27, item 4). B's bound: the write in
// progress, then the yield's window, within which its poll comes.
func TestOtherGatewayGetsHotKey(t *testing.T) {
	c := catalog(t)
	cfg := lease.Config{TTL: 30 * time.Second, WaitMax: 5 * time.Second, WaitPoll: 20 * time.Millisecond}
	ca, cb := cfg, cfg
	ca.Gateway, cb.Gateway = "gw-a-"+lease.NewID()[:8], "gw-b-"+lease.NewID()[:8]
	mA, mB := lease.NewManager(ca, c, nil), lease.NewManager(cb, c, nil)
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "hot-" + lease.NewID(), Op: "put", DeclaredSize: 1}
	stop := make(chan struct{})
	var aWrites atomic.Int64
	var wg sync.WaitGroup
	// Three writers of A write the key back to back: one always waits,
	// so every commit of A's could hand the key over within A.
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := mA.Acquire(ctx, req)
				if err != nil {
					continue
				}
				time.Sleep(5 * time.Millisecond)
				if _, err := l.Commit(ctx, lease.Landed{ETag: "a", Size: 1}); err == nil {
					aWrites.Add(1)
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); aWrites.Load() < 20; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("gateway A's writers never got going")
		}
	}
	start, before := time.Now(), aWrites.Load()
	l, err := mB.Acquire(ctx, req)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("gateway B's writer: %v after %s, while A wrote the key %d times", err, took.Round(time.Millisecond), aWrites.Load()-before)
	}
	const bound = lease.YieldFor + time.Second
	t.Logf("gateway B got the hot key after %s (A wrote it %d times meanwhile)", took.Round(time.Millisecond), aWrites.Load()-before)
	if took > bound {
		t.Errorf("gateway B waited %s, bound %s", took, bound)
	}
	if _, err := l.Commit(ctx, lease.Landed{ETag: "b", Size: 1}); err != nil {
		t.Fatal(err)
	}
}
