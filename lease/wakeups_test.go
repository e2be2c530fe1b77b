package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fencegate/fencegate/lease"
)

// fakeWakeups is a release listener the test drives: it reports the
// subscription up or down and delivers notifications when told.
type fakeWakeups struct {
	started   chan struct{}
	mu        sync.Mutex
	listening func(bool)
	released  func(string)
}

func newFakeWakeups() *fakeWakeups { return &fakeWakeups{started: make(chan struct{})} }

func (f *fakeWakeups) ListenReleases(ctx context.Context, listening func(bool), released func(string)) error {
	f.mu.Lock()
	f.listening, f.released = listening, released
	f.mu.Unlock()
	close(f.started)
	<-ctx.Done()
	return ctx.Err()
}

func (f *fakeWakeups) up(b bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listening(b)
}

func (f *fakeWakeups) release(bucket, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released(lease.KeyHash(bucket, key))
}

// listenWith starts m's listener on w until the test ends.
func listenWith(t *testing.T, m *lease.Manager, w lease.Wakeups) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.ListenForReleases(ctx, w)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func wakeups(t *testing.T, m *lease.Manager, source string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Metrics.Wakeups.WithLabelValues(source).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// twoGateways is a holder's Manager (gateway A) and a waiter's (gateway B)
// on one database, B's waiting writers signalled on waiting.
func twoGateways(t *testing.T, cfgB lease.Config) (a, b *lease.Manager, waiting chan struct{}) {
	t.Helper()
	c := catalog(t)
	a = lease.NewManager(lease.Config{TTL: 30 * time.Second, Gateway: "gw-a-" + lease.NewID()[:8]}, c, nil)
	cfgB.Gateway = "gw-b-" + lease.NewID()[:8]
	b = lease.NewManager(cfgB, c, nil)
	waiting = make(chan struct{}, 4)
	b.Hooks.Waiting = func(string, string) { waiting <- struct{}{} }
	return a, b, waiting
}

type acquired struct {
	l   *lease.Lease
	err error
	at  time.Time
}

func acquireAsync(m *lease.Manager, req lease.Request) chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := m.Acquire(context.Background(), req)
		ch <- acquired{l, err, time.Now()}
	}()
	return ch
}

func await[T any](t *testing.T, ch chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Both polls are 30 s here: only a wake-up can explain a waiter that gets
// the key within the test's few seconds.
var slowPolls = lease.Config{TTL: 30 * time.Second, WaitMax: time.Minute, WaitPoll: 30 * time.Second, WaitPollListening: 30 * time.Second}

// A release in another gateway, announced to this one, wakes the waiting
// writer at once.
func TestNotificationWakesTheWaiter(t *testing.T) {
	a, b, waiting := twoGateways(t, slowPolls)
	f := newFakeWakeups()
	listenWith(t, b, f)
	<-f.started
	f.up(true)
	ctx := context.Background()
	key := "notified-" + lease.NewID()
	req := lease.Request{Bucket: "b", Key: key, Op: "put", DeclaredSize: 1}
	held, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(b, req)
	await(t, waiting, "B's writer to wait")
	if _, err := held.Commit(ctx, lease.Landed{ETag: "e", Size: 1}); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	f.release("b", key)
	r := await(t, got, "B's writer to get the key")
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Fail("test")
	if n, p := wakeups(t, b, "notify"), wakeups(t, b, "poll"); n != 1 || p != 0 {
		t.Fatalf("wake-ups: notify %v, poll %v; want one notify and no poll", n, p)
	}
	t.Logf("B got the key %s after the notification", r.at.Sub(released).Round(time.Millisecond))
}

// A notification that arrives between a writer's refused attempt and its
// wait (the release committed just after the refusal) is not lost: the
// writer joined the key's queue before asking, so it finds the wake-up
// waiting. The real listener, through PostgreSQL.
func TestReleaseRightAfterTheRefusalIsNotMissed(t *testing.T) {
	a, b, _ := twoGateways(t, slowPolls)
	// B's writer is held in its Waiting hook, after its refused (and
	// marking) attempt and before its wait, until the release is heard.
	inHook, resume := make(chan struct{}), make(chan struct{})
	b.Hooks.Waiting = func(string, string) { close(inHook); <-resume }
	c := catalog(t)
	listenWith(t, b, c)
	waitMetric(t, "B's listener to subscribe", func() float64 { return gauge(t, b.Metrics.ListenerUp) }, 1)
	ctx := context.Background()
	key := "gap-" + lease.NewID()
	req := lease.Request{Bucket: "b", Key: key, Op: "put", DeclaredSize: 1}
	held, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(b, req)
	await(t, inHook, "B's writer to be refused")
	if _, err := held.Commit(ctx, lease.Landed{ETag: "e", Size: 1}); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, "B's listener to hear the release", func() float64 { return counter(t, b.Metrics.Notifications) }, 1)
	close(resume)
	r := await(t, got, "B's writer to get the key")
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Fail("test")
	if n, p := wakeups(t, b, "notify"), wakeups(t, b, "poll"); n != 1 || p != 0 {
		t.Fatalf("wake-ups: notify %v, poll %v; want one notify and no poll", n, p)
	}
}

// While the listener is down the waiting writer polls fast (WaitPoll):
// losing the listener wakes it, and it finds an unannounced release by its
// poll.
func TestListenerDownWaiterPollsFast(t *testing.T) {
	cfg := slowPolls
	cfg.WaitPoll = 20 * time.Millisecond
	a, b, waiting := twoGateways(t, cfg)
	f := newFakeWakeups()
	listenWith(t, b, f)
	<-f.started
	f.up(true)
	ctx := context.Background()
	key := "down-" + lease.NewID()
	req := lease.Request{Bucket: "b", Key: key, Op: "put", DeclaredSize: 1}
	held, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(b, req)
	await(t, waiting, "B's writer to wait")
	f.up(false)
	waitMetric(t, "B's writer to be woken by the listener's loss", func() float64 { return wakeups(t, b, "listener") }, 1)
	if _, err := held.Commit(ctx, lease.Landed{ETag: "e", Size: 1}); err != nil {
		t.Fatal(err)
	}
	r := await(t, got, "B's writer to get the key")
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Fail("test")
	if n, p := wakeups(t, b, "notify"), wakeups(t, b, "poll"); n != 0 || p < 1 {
		t.Fatalf("wake-ups: notify %v, poll %v; want the fast poll only", n, p)
	}
}

// A release while the listener was down went unheard: the listener coming
// back wakes the waiting writer, which finds the key free.
func TestListenerBackWakesTheWaiter(t *testing.T) {
	a, b, waiting := twoGateways(t, slowPolls)
	f := newFakeWakeups()
	listenWith(t, b, f)
	<-f.started // not subscribed yet
	ctx := context.Background()
	key := "back-" + lease.NewID()
	req := lease.Request{Bucket: "b", Key: key, Op: "put", DeclaredSize: 1}
	held, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(b, req)
	await(t, waiting, "B's writer to wait")
	if _, err := held.Commit(ctx, lease.Landed{ETag: "e", Size: 1}); err != nil {
		t.Fatal(err)
	}
	f.up(true)
	r := await(t, got, "B's writer to get the key")
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Fail("test")
	if l, p := wakeups(t, b, "listener"), wakeups(t, b, "poll"); l != 1 || p != 0 {
		t.Fatalf("wake-ups: listener %v, poll %v; want the listener's return only", l, p)
	}
}

// However long the poll, a waiter's last attempt is made at its deadline.
func TestWaiterTriesAtItsDeadline(t *testing.T) {
	cfg := slowPolls
	cfg.WaitMax, cfg.WaitLimit = 300*time.Millisecond, 300*time.Millisecond
	a, b, _ := twoGateways(t, cfg)
	ctx := context.Background()
	key := "deadline-" + lease.NewID()
	req := lease.Request{Bucket: "b", Key: key, Op: "put", DeclaredSize: 1}
	held, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Fail("test")
	start := time.Now()
	_, err = b.Acquire(ctx, req)
	if err != lease.ErrBusy {
		t.Fatalf("err %v, want ErrBusy", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("gave up after %s: the 30 s poll ran past the 300 ms wait", d)
	}
	if p := wakeups(t, b, "poll"); p != 1 {
		t.Fatalf("poll wake-ups %v, want the one at the deadline", p)
	}
}

func waitMetric(t *testing.T, what string, read func() float64, atLeast float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for read() < atLeast {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type metricWriter interface{ Write(*dto.Metric) error }

func gauge(t *testing.T, g metricWriter) float64 {
	t.Helper()
	var d dto.Metric
	if err := g.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetGauge().GetValue()
}

func counter(t *testing.T, c metricWriter) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// A holder that stops renewing (it died) is gone when its lease runs out;
// the waiter, told by its refusal how long the holder stays live at most,
// tries again then, not at its next slow poll (30 s here), and takes the
// key over.
func TestWaiterTriesWhenTheHoldersLeaseRunsOut(t *testing.T) {
	c := catalog(t)
	drv := &failingRenewals{Catalog: c}
	a := lease.NewManager(lease.Config{TTL: 1500 * time.Millisecond, RenewEvery: 200 * time.Millisecond,
		Margin: 500 * time.Millisecond, Gateway: "gw-a-" + lease.NewID()[:8]}, drv, nil)
	cfgB := slowPolls
	cfgB.Gateway = "gw-b-" + lease.NewID()[:8]
	b := lease.NewManager(cfgB, c, nil)
	f := newFakeWakeups()
	listenWith(t, b, f)
	<-f.started
	f.up(true)
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "dies-" + lease.NewID(), Op: "put", DeclaredSize: 1}
	dead, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	drv.fail.Store(true) // A renews no more: its lease runs out within 1.5 s
	start := time.Now()
	got, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Fail("test")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("B took the key over after %s: not when A's 1.5 s lease ran out", d)
	}
	if s := state(t, c, dead.AttemptID); s != lease.StateUnknown {
		t.Fatalf("the dead holder's attempt is %s, want unknown (taken over)", s)
	}
	if p, n := wakeups(t, b, "poll"), wakeups(t, b, "notify"); p < 1 || n != 0 {
		t.Fatalf("wake-ups: poll %v, notify %v; want the poll cut short at the holder's expiry", p, n)
	}
	t.Logf("B took the key over %s after it began to wait", time.Since(start).Round(time.Millisecond))
}
