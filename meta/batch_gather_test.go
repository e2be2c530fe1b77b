package meta

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// gathering reports whether w's next batch is waiting for more calls.
func gathering(w *writeBatcher) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gatherFull != nil
}

func gatheredBatches(w *writeBatcher) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gathered
}

// gatherCatalog is a catalog whose WritesInFlight reports held.
func gatherCatalog(t *testing.T, held int) *Catalog {
	return &Catalog{Pool: migratedPool(t), WritesInFlight: func() int { return held }}
}

// While many writes hold leases, a batch waits for more calls before it
// goes. The wait here ends only when three calls are queued: the first
// writer's call waits (the batcher is seen gathering, nothing sent), a
// second comes and still nothing is sent, and the third sends all three
// in one batch, one transaction.
func TestBatchWaitsForTheCallsOfManyHeldLeases(t *testing.T) {
	c := gatherCatalog(t, gatherSiblings+2)
	c.writes.gatherAfter, c.writes.gatherUpTo = time.Minute, 3
	sends, release := holdBatches(&c.writes)
	release() // sizes are reported, nothing is held at the hook
	b := testenv.RandomHex(6)
	var wg sync.WaitGroup
	got := make([]bool, 3)
	start := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, got[i] = acquire(t, c, b, fmt.Sprint("k", i), "gw", false)
		}()
	}
	start(0)
	for deadline := time.Now().Add(10 * time.Second); !gathering(&c.writes); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first call's batch did not wait for more calls")
		}
	}
	start(1)
	waitQueued(t, &c.writes, 2)
	select {
	case n := <-sends:
		t.Fatalf("a batch of %d went before three calls were queued", n)
	default:
	}
	start(2)
	select {
	case n := <-sends:
		if n != 3 {
			t.Fatalf("the batch has %d calls, want the 3 it waited for", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the third call did not end the wait")
	}
	wg.Wait()
	for i, ok := range got {
		if !ok {
			t.Errorf("writer %d did not get its free key", i)
		}
	}
	if calls, batches, _ := c.BatchStats(); calls != 3 || batches != 1 {
		t.Errorf("calls %d, batches %d; want 3, 1", calls, batches)
	}
	if g := gatheredBatches(&c.writes); g != 1 {
		t.Errorf("%d batches waited, want 1", g)
	}
	if n := leaseWriters(t, c, b); n != 1 {
		t.Errorf("the 3 acquires' lease rows were written by %d transactions, want 1", n)
	}
}

// With fewer writes holding leases than gatherSiblings (a lone writer, a
// few, a hot key's one holder at a time), a call goes at once: were it to
// wait, it would wait the minute this test sets.
func TestBatchGoesAtOnceWithFewHeldLeases(t *testing.T) {
	for _, held := range []int{0, gatherSiblings - 1} {
		c := gatherCatalog(t, held)
		c.writes.gatherAfter = time.Minute
		sends, release := holdBatches(&c.writes)
		release()
		done := make(chan bool, 1)
		go func() { _, ok := acquire(t, c, testenv.RandomHex(6), "k", "gw", false); done <- ok }()
		select {
		case n := <-sends:
			if n != 1 {
				t.Fatalf("%d held: a batch of %d, want the lone call", held, n)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d held: the lone call waited for others", held)
		}
		if !<-done {
			t.Fatalf("%d held: the writer did not get its free key", held)
		}
		if g := gatheredBatches(&c.writes); g != 0 {
			t.Fatalf("%d held: %d batches waited, want 0", held, g)
		}
	}
}

// The wait is bounded: with no other call coming, the batch goes alone
// once gatherWait (30 ms here) has passed.
func TestBatchWaitEndsAfterItsTime(t *testing.T) {
	c := gatherCatalog(t, gatherSiblings)
	c.writes.gatherAfter = 30 * time.Millisecond
	sends, release := holdBatches(&c.writes)
	release()
	t0 := time.Now()
	done := make(chan bool, 1)
	go func() { _, ok := acquire(t, c, testenv.RandomHex(6), "k", "gw", false); done <- ok }()
	select {
	case n := <-sends:
		if n != 1 {
			t.Fatalf("a batch of %d, want the lone call", n)
		}
		if waited := time.Since(t0); waited < 30*time.Millisecond {
			t.Fatalf("sent after %s, before the wait's 30 ms", waited)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end")
	}
	if !<-done {
		t.Fatal("the writer did not get its free key")
	}
	if g := gatheredBatches(&c.writes); g != 1 {
		t.Fatalf("%d batches waited, want 1", g)
	}
}
