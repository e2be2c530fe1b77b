package conformance

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Keys whose every send stalls past the timeout do not hold the target's
// other keys back: their events keep flowing while those fail, each key's
// still in generation order, one at a time. (Delivered in rounds
// that each waited for their slowest send, a busy key advanced one event per
// timeout, and a receiver slow for one key built every other key a backlog:
// the chaos campaign's drain once took longer than its three minutes.)
func TestNotifySlowKeyHoldsNoOther(t *testing.T) {
	g := startGatewayProcess(t, testenv.Store(t), fastNotifyEnv...)
	bucket := "t-notify-slow-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	rcv := startFlakyReceiver(t, "", func(int64) (int, time.Duration) { return 200, 0 })
	// Several slow keys, each due again 100-200 ms after its last try
	// failed (fastNotifyEnv's back-off), so that nearly always one is due.
	slowKeys := []string{"slow-0", "slow-1", "slow-2", "slow-3", "slow-4", "slow-5"}
	const slow, fast = "slow-0", "fast"
	rcv.mu.Lock()
	rcv.byKey = func(key string) (int, time.Duration, bool) {
		// Past the gateway's 300 ms timeout (fastNotifyEnv): every try
		// of the slow key's event fails after the whole timeout.
		return 200, 2 * time.Second, slices.Contains(slowKeys, key)
	}
	rcv.mu.Unlock()
	tg := addTarget(t, "webhook", "slow-"+randomSuffix(), "--url", "http://"+rcv.addr+"/")
	configureBucket(t, g.Endpoint, bucket, tg.ARN)

	for _, k := range slowKeys {
		if res := putRaw(g.Endpoint, bucket, k, []byte("s"), nil); res.Status != 200 {
			t.Fatalf("PUT %s: %d", k, res.Status)
		}
	}
	waitFor(t, "the slow key's first try", 10*time.Second, func() bool { return tries(rcv, slow) > 0 })
	const writes = 40
	for i := range writes {
		if res := putRaw(g.Endpoint, bucket, fast, []byte(fmt.Sprint(i)), nil); res.Status != 200 {
			t.Fatalf("PUT %s #%d: %d", fast, i, res.Status)
		}
	}
	wrote := time.Now()
	slowBefore := tries(rcv, slow)
	waitFor(t, "the fast key's events", 30*time.Second, func() bool { return queued(t, tg.Name, fast) == 0 })
	took := time.Since(wrote)
	slowDuring := tries(rcv, slow) - slowBefore
	t.Logf("%d events of the fast key delivered %s after its last write, while the slow key's event was tried %d times",
		writes, took.Round(time.Millisecond), slowDuring)
	for _, k := range slowKeys {
		if queued(t, tg.Name, k) != 1 {
			t.Fatalf("%s's event left the queue: its receiver never answered in time", k)
		}
	}
	// Both sides at the critical point: some of the fast key's events
	// arrived while a try of the slow key's was still waiting for its
	// answer (each waits the gateway's whole 300 ms timeout).
	if !overlapped(rcv.events(), slow, fast, 300*time.Millisecond) {
		t.Errorf("no event of the fast key arrived while the slow key's send was outstanding: the test shows nothing")
	}
	// At one event per 300 ms timeout, 40 events take 12 s; the bound
	// leaves a slow machine ten times the unhindered drain's ~0.3 s.
	if took > 3*time.Second {
		t.Errorf("the fast key's %d events took %s to deliver beside a key that times out: one key holds the others back", writes, took)
	}

	rcv.mu.Lock()
	rcv.byKey = nil
	rcv.mu.Unlock()
	waitFor(t, "the target's queue to drain", 30*time.Second, func() bool { return queueEmpty(t, tg.Name) })
	checkDelivered(t, committedEvents(t, bucket), rcv.events(), "")
}

// A failed send is tried again when its back-off ends, not at the next poll
// after it: a key whose every event fails once (a receiver answering every
// other request 500) drains at the back-off's pace. (A round used to end once
// nothing was in flight, so each failure also waited for the target's next
// poll: with a 2 s poll, 12 events took over 20 s.)
func TestNotifyRetryAtItsBackoff(t *testing.T) {
	g := startGatewayProcess(t, testenv.Store(t), "FENCEGATE_NOTIFY_TIMEOUT=300ms", "FENCEGATE_NOTIFY_RETRY=20ms",
		"FENCEGATE_NOTIFY_RETRY_MAX=40ms", "FENCEGATE_NOTIFY_POLL=2s", "FENCEGATE_NOTIFY_MAX_TRIES=1000", "FENCEGATE_NOTIFY_CLAIM=5s")
	bucket := "t-notify-retry-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	rcv := startFlakyReceiver(t, "", func(n int64) (int, time.Duration) {
		if n%2 == 1 {
			return 500, 0
		}
		return 200, 0
	})
	tg := addTarget(t, "webhook", "retry-"+randomSuffix(), "--url", "http://"+rcv.addr+"/")
	configureBucket(t, g.Endpoint, bucket, tg.ARN)

	const key, writes = "k", 12
	for i := range writes {
		if res := putRaw(g.Endpoint, bucket, key, []byte(fmt.Sprint(i)), nil); res.Status != 200 {
			t.Fatalf("PUT %s #%d: %d", key, i, res.Status)
		}
	}
	wrote := time.Now()
	waitFor(t, "the key's events", 60*time.Second, func() bool { return queued(t, tg.Name, key) == 0 })
	took := time.Since(wrote)
	t.Logf("%d events, each failing once, delivered %s after the last write (%d requests)", writes, took.Round(time.Millisecond), tries(rcv, key))
	// Both sides reached: every event was refused once before its
	// acknowledgement (the receiver alternates, one event in flight).
	if got := tries(rcv, key); got < 2*writes {
		t.Fatalf("the receiver got %d requests for %d events: not every event failed once", got, writes)
	}
	// At the back-off's 10-40 ms a failure, 12 events take well under a
	// second; one poll per failure is 24 s.
	if took > 5*time.Second {
		t.Errorf("%d events that each failed once took %s: retries wait for the poll, not their back-off", writes, took)
	}
	checkDelivered(t, committedEvents(t, bucket), rcv.events(), "")
}

// tries is how many requests the receiver got for key's events.
func tries(r *flakyReceiver, key string) int {
	n := 0
	for _, e := range r.events() {
		if e.Key == key {
			n++
		}
	}
	return n
}

// overlapped reports whether an event of key b arrived within hold after a
// request for key a arrived.
func overlapped(got []gotEvent, a, b string, hold time.Duration) bool {
	for _, x := range got {
		if x.Key != a {
			continue
		}
		for _, y := range got {
			if y.Key == b && y.At.After(x.At) && y.At.Before(x.At.Add(hold)) {
				return true
			}
		}
	}
	return false
}
