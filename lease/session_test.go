package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// stoppableHeartbeats stands in front of the real catalog: once stop is set,
// every heartbeat hangs until its context ends (a gateway that cannot reach
// PostgreSQL, or one that is paused: its session row stops being extended).
type stoppableHeartbeats struct {
	*meta.Catalog
	stop atomic.Bool
}

func (s *stoppableHeartbeats) Heartbeat(ctx context.Context, id string, timeout time.Duration) (bool, int, error) {
	if s.stop.Load() {
		<-ctx.Done()
		return false, 0, errors.New("injected: heartbeat hung")
	}
	return s.Catalog.Heartbeat(ctx, id, timeout)
}

// Short session timings; key leases live a minute, so only the session can
// free a key within these tests.
var sessionCfg = lease.Config{TTL: time.Minute, RenewEvery: 20 * time.Second, Margin: 10 * time.Second,
	WaitMax: 10 * time.Second, WaitPoll: 20 * time.Millisecond, DBTimeout: 5 * time.Second,
	SessionHeartbeat: 100 * time.Millisecond, SessionTimeout: 1500 * time.Millisecond, SessionMargin: 500 * time.Millisecond}

func sessionManager(t *testing.T, drv lease.Driver, gateway string) *lease.Manager {
	t.Helper()
	cfg := sessionCfg
	cfg.Gateway = gateway
	m := lease.NewManager(cfg, drv, nil)
	if err := m.StartSession(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.EndSession(context.Background()) })
	return m
}

func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var mv dto.Metric
	if err := c.Write(&mv); err != nil {
		t.Fatal(err)
	}
	if mv.Counter != nil {
		return mv.GetCounter().GetValue()
	}
	if mv.Gauge != nil {
		return mv.GetGauge().GetValue()
	}
	return float64(mv.GetHistogram().GetSampleCount())
}

// A holder whose session dies (its heartbeats stop) loses its key lease by
// its local session deadline, long before the key lease's own TTL, and
// refuses new writes until its session is back; another gateway takes the
// key over once the session has expired on PostgreSQL's clock, the dead
// holder's attempt becomes unknown, and the dead holder's commit is refused
// although its key lease's own expiry is still ahead.
func TestDeadSessionFreesKeyLease(t *testing.T) {
	c := catalog(t)
	drv := &stoppableHeartbeats{Catalog: c}
	dead := sessionManager(t, drv, "dead")
	live := sessionManager(t, c, "live")
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "session-" + lease.NewID(), Op: "put", DeclaredSize: 1}
	old, err := dead.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// While the session heartbeats, the lease holds: another gateway waits
	// and gives up.
	time.Sleep(2 * sessionCfg.SessionTimeout)
	if old.IsLost() {
		t.Fatal("lost a lease whose session is alive")
	}
	short := req
	short.NoWait = true
	if _, err := live.Acquire(ctx, short); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("another gateway on a key held by a live session: %v, want ErrBusy", err)
	}

	drv.stop.Store(true)
	stoppedAt := time.Now()
	select {
	case <-old.Lost():
	case <-time.After(sessionCfg.SessionTimeout + time.Second):
		t.Fatal("the session deadline never marked the held lease lost")
	}
	lostAfter := time.Since(stoppedAt)
	if lostAfter > sessionCfg.SessionTimeout-sessionCfg.SessionMargin+300*time.Millisecond {
		t.Fatalf("lost %s after heartbeats stopped, later than timeout - margin", lostAfter)
	}
	// Locally early: on the database clock the session is still alive, and
	// the key still held.
	if _, err := live.Acquire(ctx, short); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("the key was free when the holder noticed its session was lost (%v): the local deadline must come first", err)
	}
	// The dead gateway takes no writes while its session is down.
	if _, err := dead.Acquire(ctx, lease.Request{Bucket: "b", Key: "other-" + lease.NewID(), Op: "put", DeclaredSize: 1}); !errors.Is(err, lease.ErrNoSession) {
		t.Fatalf("a write through a gateway without a session: %v, want ErrNoSession", err)
	}

	// The other gateway waits and takes the key over once the session expired.
	newer, err := live.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("takeover after the holder's session died: %v", err)
	}
	took := time.Since(stoppedAt)
	t.Logf("lost locally after %s, taken over after %s", lostAfter.Round(time.Millisecond), took.Round(time.Millisecond))
	if took > sessionCfg.SessionTimeout+time.Second {
		t.Fatalf("took over %s after heartbeats stopped: the session timeout is %s", took, sessionCfg.SessionTimeout)
	}
	if s := state(t, c, old.AttemptID); s != lease.StateUnknown {
		t.Fatalf("the dead session's attempt is %s after the takeover, want unknown", s)
	}
	if n := counterValue(t, live.Metrics.SessionTakeovers); n != 1 {
		t.Fatalf("takeovers of dead sessions' leases: %v, want 1", n)
	}
	if n := counterValue(t, live.Metrics.SessionTakeoverDelay); n != 1 {
		t.Fatalf("takeover delay observations: %v, want 1", n)
	}
	if _, err := old.Commit(ctx, lease.Landed{ETag: "x", Size: 1}); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("commit by the dead session's holder: %v, want ErrLeaseLost", err)
	}
	if _, err := newer.Commit(ctx, lease.Landed{ETag: "y", Size: 1}); err != nil {
		t.Fatal(err)
	}
}

// The commit refuses a holder whose session died even when nothing took its
// key over yet: the short effective lease is safe because the commit checks
// the same rule as the takeover.
func TestCommitRefusedAfterSessionDied(t *testing.T) {
	c := catalog(t)
	drv := &stoppableHeartbeats{Catalog: c}
	m := sessionManager(t, drv, "paused")
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "paused-" + lease.NewID(), Op: "put", DeclaredSize: 1}
	l, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	drv.stop.Store(true)
	time.Sleep(sessionCfg.SessionTimeout + 300*time.Millisecond)
	// Renewal and progress are refused too.
	if ok, err := c.Renew(ctx, req.Bucket, req.Key, l.AttemptID, time.Minute); err != nil || ok {
		t.Fatalf("renewal under a dead session: %v %v, want refused", ok, err)
	}
	if _, err := l.Commit(ctx, lease.Landed{ETag: "x", Size: 1}); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("commit under a dead session: %v, want ErrLeaseLost", err)
	}
	if s := state(t, c, l.AttemptID); s != lease.StateUnknown {
		t.Fatalf("the refused commit's attempt is %s, want unknown", s)
	}
}

// A gateway starting with a new session never takes a live gateway's key;
// its reconciler's view (the unresolved attempts) leaves it alone; a clean
// end of the holder's session frees the key at once.
func TestLiveSessionKeptAndEndedSessionFreesAtOnce(t *testing.T) {
	c := catalog(t)
	holder := sessionManager(t, c, "holder")
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "end-" + lease.NewID(), Op: "put", DeclaredSize: 1}
	l, err := holder.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(false)
	newcomer := sessionManager(t, c, "newcomer")
	short := req
	short.NoWait = true
	if _, err := newcomer.Acquire(ctx, short); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("a new gateway on a live gateway's key: %v, want ErrBusy", err)
	}
	ks, err := c.KeyState(ctx, req.Bucket, req.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(ks.Unresolved) != 0 {
		t.Fatalf("a live session's attempt counts as unresolved: %+v", ks.Unresolved)
	}
	// Listing sessions shows the holder's and its lease.
	ss, err := c.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range ss {
		if s.ID == holder.SessionID() {
			found = s.Alive && len(s.Leases) == 1 && s.Leases[0].Key == req.Key && s.Leases[0].Holder == l.AttemptID
		}
	}
	if !found {
		t.Fatalf("sessions listing lacks the holder's live session and lease: %+v", ss)
	}

	if err := holder.EndSession(ctx); err != nil {
		t.Fatal(err)
	}
	if !l.IsLost() {
		t.Fatal("ending the session left its lease held locally")
	}
	start := time.Now()
	got, err := newcomer.Acquire(ctx, short)
	if err != nil {
		t.Fatalf("the key of an ended session: %v, want free at once", err)
	}
	t.Logf("free %s after the session ended", time.Since(start).Round(time.Millisecond))
	got.Finish(lease.StateFailed, "test")
}

// A gateway whose session expired while it could not heartbeat opens a new
// session when PostgreSQL answers again (the dead one's keys may be others'
// now) and takes writes again.
func TestSessionReopensAfterExpiry(t *testing.T) {
	c := catalog(t)
	drv := &stoppableHeartbeats{Catalog: c}
	m := sessionManager(t, drv, "flaky")
	ctx := context.Background()
	first := m.SessionID()
	drv.stop.Store(true)
	time.Sleep(sessionCfg.SessionTimeout + 300*time.Millisecond)
	req := lease.Request{Bucket: "b", Key: "reopen-" + lease.NewID(), Op: "put", DeclaredSize: 1}
	if _, err := m.Acquire(ctx, req); !errors.Is(err, lease.ErrNoSession) {
		t.Fatalf("write while the session is down: %v, want ErrNoSession", err)
	}
	drv.stop.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for m.SessionID() == first || m.SessionID() == "" {
		if time.Now().After(deadline) {
			t.Fatal("no new session after PostgreSQL answered again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	l, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("write after the session came back: %v", err)
	}
	if _, err := l.Commit(ctx, lease.Landed{ETag: "z", Size: 1}); err != nil {
		t.Fatal(err)
	}
}
