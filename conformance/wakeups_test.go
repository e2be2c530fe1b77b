package conformance

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// metricValue reads a counter's or a gauge's value.
func metricValue(t *testing.T, m interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Gauge != nil {
		return d.GetGauge().GetValue()
	}
	return d.GetCounter().GetValue()
}

func wakeupsOf(t *testing.T, g *testGateway, source string) float64 {
	t.Helper()
	return metricValue(t, g.Leases.Metrics.Wakeups.WithLabelValues(source))
}

// waitingGateway starts a gateway whose writers wait with the given polls
// (30 s for the fallback), signalling on waiting when one starts to wait.
func waitingGateway(t *testing.T, store *stack.Endpoint, fast time.Duration, o gatewayOptions) (*testGateway, *signal) {
	t.Helper()
	waiting := newSignal()
	o.Store = store
	o.Lease = testLease
	o.Lease.WaitMax, o.Lease.WaitPoll, o.Lease.WaitPollListening = time.Minute, fast, 30*time.Second
	o.DatabaseURL = testenv.DatabaseURL(t) // a pool of its own
	o.Hooks = lease.Hooks{Waiting: func(string, string) { waiting.fire() }}
	return startGateway(t, o), waiting
}

// contend has gateway a hold key (its PUT held at the store) while b's PUT
// of the key waits, then lets a's PUT go: it returns b's answer, which must
// come within `within` of a's (a 200 after a's commit).
func contend(t *testing.T, fp *faultproxy.HTTP, a, b *testGateway, bWaiting *signal, bucket, key string, within time.Duration) rawResult {
	t.Helper()
	held := fp.Hold(faultproxy.MethodPath("PUT", "/"+bucket+"/"+key), 1)
	resA := make(chan rawResult, 1)
	go func() { resA <- putRaw(a.Endpoint, bucket, key, []byte("from A"), nil) }()
	<-held.Arrived // A holds the key's lease; its PUT is at the store's door
	resB := make(chan rawResult, 1)
	go func() { resB <- putRaw(b.Endpoint, bucket, key, []byte("from B"), nil) }()
	bWaiting.wait(t, "B's PUT to wait for A's lease")
	held.Release()
	ra := <-resA
	if ra.Status != 200 {
		t.Fatalf("A's PUT: %+v", ra)
	}
	committed := time.Now()
	select {
	case rb := <-resB:
		if rb.Status != 200 {
			t.Fatalf("B's PUT: %+v", rb)
		}
		t.Logf("%s: B's PUT answered %s after A's", key, time.Since(committed).Round(time.Millisecond))
		gens := generationsOf(t, bucket, key)
		if len(gens) != 2 || gens[0].Generation != ra.Generation || gens[1].Generation != rb.Generation {
			t.Fatalf("generations %+v, want A's %d then B's %d", gens, ra.Generation, rb.Generation)
		}
		return rb
	case <-time.After(within):
		t.Fatalf("%s: B's PUT still waits %s after A's commit (its fallback poll is 30 s)", key, within)
		return rawResult{}
	}
}

// A release in one gateway wakes the writer waiting for that key in
// another, through PostgreSQL's NOTIFY: with B's fallback poll at 30 s, B
// writes within a moment of A's commit, and B counts the wake-up as a
// notification (not a poll).
func TestReleaseWakesWaiterInAnotherGateway(t *testing.T) {
	fp, fep := faultStore(t)
	gA := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease})
	gB, bWaiting := waitingGateway(t, &fep, 30*time.Second, gatewayOptions{})
	waitFor(t, "B's release listener to subscribe", 30*time.Second, func() bool {
		return metricValue(t, gB.Leases.Metrics.ListenerUp) == 1
	})
	bucket := "t-wakeup-" + randomSuffix()
	createBucket(t, gA.Endpoint, bucket)
	contend(t, fp, gA, gB, bWaiting, bucket, "k", 5*time.Second)
	if n, p := wakeupsOf(t, gB, "notify"), wakeupsOf(t, gB, "poll"); n != 1 || p != 0 {
		t.Fatalf("B's wake-ups: notify %v, poll %v; want one notification, no poll", n, p)
	}
	if got := getBody(t, gA.Endpoint, bucket, "k"); string(got) != "from B" {
		t.Fatalf("content %q, want B's (it wrote last)", got)
	}
	audit(t, gA.Store, bucket, "k")
}

// The release listener's connection cut (as by a PostgreSQL restart) and
// kept from reconnecting: the gateway notices, its waiting writers fall back
// to the fast poll and still get their key promptly; once the connection is
// possible again the listener resubscribes and wake-ups come by
// notification again. The same after a silent partition, which only the
// listener's ping notices. Only the listener goes through the fault proxy
// here; the gateway's pool does not.
func TestReleaseListenerReconnects(t *testing.T) {
	fp, fep := faultStore(t)
	pgp, pgURL := faultDatabase(t)
	ctx := context.Background()
	listenPool, err := meta.Open(ctx, pgURL, meta.PoolConfig{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(listenPool.Close)
	gA := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease})
	gB, bWaiting := waitingGateway(t, &fep, 50*time.Millisecond, gatewayOptions{Wakeups: &meta.Catalog{Pool: listenPool}})
	listening := func(want float64) func() bool {
		return func() bool { return metricValue(t, gB.Leases.Metrics.ListenerUp) == want }
	}
	waitFor(t, "B's release listener to subscribe", 30*time.Second, listening(1))
	bucket := "t-wakeup-cut-" + randomSuffix()
	createBucket(t, gA.Endpoint, bucket)

	pgp.Blackhole(true) // reconnects hang until lifted
	pgp.CutAll()
	waitFor(t, "B to notice its listener is gone", 30*time.Second, listening(0))
	if lost := metricValue(t, gB.Leases.Metrics.ListenerLost); lost != 1 {
		t.Fatalf("listener lost %v times, want 1", lost)
	}
	contend(t, fp, gA, gB, bWaiting, bucket, "while-down", 5*time.Second)
	if n, p := wakeupsOf(t, gB, "notify"), wakeupsOf(t, gB, "poll"); n != 0 || p < 1 {
		t.Fatalf("listener down: B's wake-ups notify %v, poll %v; want the fast poll only", n, p)
	}
	if metricValue(t, gB.Leases.Metrics.ListenerUp) != 0 {
		t.Fatal("the listener came back during the round meant to run without it")
	}

	pgp.Blackhole(false)
	waitFor(t, "B's listener to resubscribe", time.Minute, listening(1))
	polls := wakeupsOf(t, gB, "poll")
	contend(t, fp, gA, gB, bWaiting, bucket, "after-reconnect", 5*time.Second)
	if n, p := wakeupsOf(t, gB, "notify"), wakeupsOf(t, gB, "poll"); n != 1 || p != polls {
		t.Fatalf("listener back: B's wake-ups notify %v, poll %v (was %v); want one notification, no poll", n, p, polls)
	}

	// A silent partition (no reset, nothing answers): the listener finds
	// out by its ping when the connection stays quiet, and comes back.
	pgp.Blackhole(true)
	silent := time.Now()
	waitFor(t, "B to notice its silent listener is gone", 30*time.Second, listening(0))
	t.Logf("a silent listener was noticed gone %s after the partition", time.Since(silent).Round(time.Millisecond))
	pgp.Blackhole(false)
	waitFor(t, "B's listener to resubscribe", time.Minute, listening(1))
	if lost := metricValue(t, gB.Leases.Metrics.ListenerLost); lost != 2 {
		t.Fatalf("listener lost %v times, want 2", lost)
	}
	audit(t, gA.Store, bucket, "while-down", "after-reconnect")
}
