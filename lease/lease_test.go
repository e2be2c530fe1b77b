package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func catalog(t *testing.T) *meta.Catalog {
	t.Helper()
	ctx := context.Background()
	pool, err := meta.Open(ctx, testenv.DatabaseURL(t), meta.PoolConfig{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := meta.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return &meta.Catalog{Pool: pool}
}

// failingRenewals stands in front of the real catalog and fails renewals on
// demand (a partition between a holder and PostgreSQL).
type failingRenewals struct {
	*meta.Catalog
	fail atomic.Bool // read by the lease's renewer goroutine
}

func (f *failingRenewals) Renew(ctx context.Context, bucket, key, holder string, ttl time.Duration) (bool, error) {
	if f.fail.Load() {
		return false, errors.New("injected: renewal failed")
	}
	return f.Catalog.Renew(ctx, bucket, key, holder, ttl)
}

// hangingRenewals stands in front of the real catalog and, once hang is set,
// holds every renewal until its context ends (a database that stops
// answering): no renewal fails before the holder's local deadline, so only
// that deadline can mark the lease lost.
type hangingRenewals struct {
	*meta.Catalog
	hang     atomic.Bool
	entered  chan struct{} // told when a renewal starts hanging
	unblock  chan struct{} // closed to let hanging renewals return
	returned atomic.Int64  // hanging renewals that have returned
}

func (h *hangingRenewals) Renew(ctx context.Context, bucket, key, holder string, ttl time.Duration) (bool, error) {
	if !h.hang.Load() {
		return h.Catalog.Renew(ctx, bucket, key, holder, ttl)
	}
	select {
	case h.entered <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
	case <-h.unblock:
	}
	h.returned.Add(1)
	return false, errors.New("injected: renewal hung")
}

func state(t *testing.T, c *meta.Catalog, id string) string {
	t.Helper()
	a, err := c.AttemptByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a.State
}

func TestConflictBusyAndRelease(t *testing.T) {
	c := catalog(t)
	m := lease.NewManager(lease.Config{TTL: 5 * time.Second, WaitMax: 200 * time.Millisecond, WaitPoll: 20 * time.Millisecond}, c, nil)
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "conflict", Op: "put", DeclaredSize: 1}
	l, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	cond := req
	cond.ClientConditional = true
	if _, err := m.Acquire(ctx, cond); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("conditional writer on a leased key: %v, want ErrConflict", err)
	}
	start := time.Now()
	if _, err := m.Acquire(ctx, req); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("waiting writer: %v, want ErrBusy", err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("gave up after %s, before the bounded wait", waited)
	}
	l.Finish(lease.StateFailed, "test")
	if state(t, c, l.AttemptID) != lease.StateFailed {
		t.Fatal("attempt state not recorded")
	}
	l2, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	l2.Finish(lease.StateFailed, "test")
}

// A holder whose renewals fail loses its lease at the first failed renewal
// (TestLocalDeadlineFiresWhileRenewalHangs covers the local deadline); a new
// writer then takes over and the old attempt becomes unknown; the old holder's
// commit is refused, and the new holder's commit leaves the old attempt a guard.
func TestLostLeaseTakeoverAndRefusedCommit(t *testing.T) {
	c := catalog(t)
	drv := &failingRenewals{Catalog: c}
	cfg := lease.Config{TTL: 1500 * time.Millisecond, RenewEvery: 200 * time.Millisecond, Margin: 500 * time.Millisecond, WaitMax: 5 * time.Second, WaitPoll: 20 * time.Millisecond}
	m := lease.NewManager(cfg, drv, nil)
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "takeover", Op: "put", DeclaredSize: 1}
	old, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// Renewals succeed for a while: the lease outlives its TTL.
	time.Sleep(2 * cfg.TTL)
	select {
	case <-old.Lost():
		t.Fatal("lost a lease whose renewals succeed")
	default:
	}
	drv.fail.Store(true)
	lostAt := time.Now()
	select {
	case <-old.Lost():
	case <-time.After(cfg.TTL):
		t.Fatal("a holder with failing renewals never noticed")
	}
	t.Logf("lost %s after renewals began to fail", time.Since(lostAt).Round(time.Millisecond))

	m2 := lease.NewManager(cfg, c, nil)
	newer, err := m2.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if s := state(t, c, old.AttemptID); s != lease.StateUnknown {
		t.Fatalf("taken-over attempt is %s, want unknown", s)
	}
	if _, err := old.Commit(ctx, lease.Landed{ETag: "x", Size: 1}); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("commit by the old holder: %v, want ErrLeaseLost", err)
	}
	gen, err := newer.Commit(ctx, lease.Landed{ETag: "y", Size: 1})
	if err != nil || gen == 0 {
		t.Fatalf("commit by the new holder: %d, %v", gen, err)
	}
	// No commit proves that an unknown write cannot land (docs/DESIGN.md,
	// "When a guard ends"): the old attempt stays a guard.
	if s := state(t, c, old.AttemptID); s != lease.StateUnknown {
		t.Fatalf("the taken-over attempt is %s after a later commit, want unknown", s)
	}
}

// A holder whose renewal hangs (the database stops answering; the call is
// bounded only by DBTimeout, far beyond the TTL) loses its lease by its local
// deadline: last successful renewal's send time + TTL - Margin, while the
// hanging renewal has still not returned, and before the lease expires on the
// database clock.
func TestLocalDeadlineFiresWhileRenewalHangs(t *testing.T) {
	c := catalog(t)
	drv := &hangingRenewals{Catalog: c, entered: make(chan struct{}, 1), unblock: make(chan struct{})}
	cfg := lease.Config{TTL: 2 * time.Second, RenewEvery: 300 * time.Millisecond, Margin: 600 * time.Millisecond,
		WaitMax: time.Second, WaitPoll: 20 * time.Millisecond, DBTimeout: 30 * time.Second}
	m := lease.NewManager(cfg, drv, nil)
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "deadline-" + lease.NewID(), Op: "put", DeclaredSize: 1}
	l, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Finish(lease.StateFailed, "test")
	defer close(drv.unblock) // before Finish, which waits for the renewer
	// The last renewal that succeeds is sent no later than here.
	drv.hang.Store(true)
	lastGoodBy := time.Now()
	select {
	case <-drv.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal was attempted")
	}
	select {
	case <-l.Lost():
	case <-time.After(cfg.TTL + 5*time.Second):
		t.Fatal("the local deadline never fired while the renewal hung")
	}
	lostAfter := time.Since(lastGoodBy)
	if n := drv.returned.Load(); n != 0 {
		t.Fatalf("%d hanging renewals returned before the lease was lost: the loss came from a failed renewal, not the deadline", n)
	}
	if lostAfter > cfg.TTL-cfg.Margin+time.Second {
		t.Fatalf("lost %s after the last good renewal, later than TTL - Margin (%s)", lostAfter, cfg.TTL-cfg.Margin)
	}
	// The loss is local and early: on the database clock the lease is still
	// held (it expires TTL after the last good renewal, Margin later).
	var live bool
	if err := c.Pool.QueryRow(ctx, `SELECT expires_at > clock_timestamp() FROM leases WHERE bucket = $1 AND key = $2 AND holder = $3`,
		req.Bucket, req.Key, l.AttemptID).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if !live {
		t.Fatal("the lease had already expired on the database clock when the holder noticed")
	}
	var mv dto.Metric
	if err := m.Metrics.Lost.Write(&mv); err != nil {
		t.Fatal(err)
	}
	if got := mv.GetCounter().GetValue(); got != 1 {
		t.Fatalf("lost-lease metric %v, want 1", got)
	}
}

// failingReleases stands in front of the real catalog and fails the next
// Release calls (PostgreSQL unreachable for a moment when a writer ends).
type failingReleases struct {
	*meta.Catalog
	fail  atomic.Int64 // how many Release calls still fail
	calls atomic.Int64
}

func (f *failingReleases) Release(ctx context.Context, bucket, key, holder string, end lease.Ending) error {
	f.calls.Add(1)
	if f.fail.Add(-1) >= 0 {
		return errors.New("injected: release failed")
	}
	return f.Catalog.Release(ctx, bucket, key, holder, end)
}

// A release that fails is tried again in the background: the key is free
// again in a moment, not when its lease's TTL runs out, the writer waiting
// for it is woken and takes it, and the ended attempt keeps the state it
// ended with (failed), not the unknown a takeover after expiry would give it.
func TestFailedReleaseIsTriedAgain(t *testing.T) {
	c := catalog(t)
	drv := &failingReleases{Catalog: c}
	m := lease.NewManager(lease.Config{TTL: time.Minute, WaitMax: 5 * time.Second, WaitPoll: 10 * time.Second}, drv, nil)
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "release-again", Op: "put", DeclaredSize: 1}
	l, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	drv.fail.Store(2)
	waiting := make(chan struct{})
	m.Hooks.Waiting = func(bucket, key string) {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	got := make(chan error, 1)
	var l2 *lease.Lease
	go func() {
		var err error
		l2, err = m.Acquire(ctx, req)
		got <- err
	}()
	<-waiting // the second writer found the key held and waits
	start := time.Now()
	l.Finish(lease.StateFailed, "test")
	if err := <-got; err != nil {
		t.Fatalf("the writer waiting for the key after a failed release: %v (%d releases tried), want the key", err, drv.calls.Load())
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the key was free again after %s", took)
	}
	if n := drv.calls.Load(); n != 3 {
		t.Errorf("%d releases tried, want 3 (two failed, the third freed the key)", n)
	}
	if s := state(t, c, l.AttemptID); s != lease.StateFailed {
		t.Errorf("the ended attempt is %s, want failed", s)
	}
	l2.Finish(lease.StateFailed, "test")
}

// TestAcquireBindsReservation: a write under a reservation is bound to it by
// its acquire, in the acquire's own transaction (no bind of its own: one
// write transaction fewer per reserved upload, docs/COST.md); under a
// reservation that is no longer live the acquire gives the lease back, the
// attempt failed, and nothing may be sent.
func TestAcquireBindsReservation(t *testing.T) {
	c := catalog(t)
	rs := &meta.Reservations{Pool: c.Pool}
	m := lease.NewManager(lease.Config{TTL: 5 * time.Second, WaitMax: time.Second, WaitPoll: 20 * time.Millisecond}, c, nil)
	ctx := context.Background()
	key := "bind-" + lease.NewID()
	r, err := rs.Create(ctx, meta.ReservationRequest{Bucket: "b", Key: key, AccessKeyID: "K", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	req := lease.Request{Bucket: "b", Key: key, Op: "put", DeclaredSize: 1, Reservation: r.ID}
	l, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !l.ReservationBound {
		t.Fatal("the acquire did not bind the reservation")
	}
	if id, ok, err := rs.BoundTo(ctx, l.AttemptID); err != nil || !ok || id != r.ID {
		t.Fatalf("binding of %s: %q %v %v, want %s", l.AttemptID, id, ok, err, r.ID)
	}
	l.Finish(lease.StateFailed, "test")

	plain, err := m.Acquire(ctx, lease.Request{Bucket: "b", Key: key + "-plain", Op: "put", DeclaredSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if plain.ReservationBound {
		t.Fatal("a write without a reservation reported one bound")
	}
	if _, ok, _ := rs.BoundTo(ctx, plain.AttemptID); ok {
		t.Fatal("a write without a reservation was bound")
	}
	plain.Finish(lease.StateFailed, "test")

	if _, err := rs.End(ctx, r.ID, meta.ReservationCancelled); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(ctx, req); !errors.Is(err, lease.ErrReservationEnded) {
		t.Fatalf("acquire under a cancelled reservation: %v, want ErrReservationEnded", err)
	}
	var st, reason string
	var bound bool
	if err := c.Pool.QueryRow(ctx, `SELECT state, reason, EXISTS (SELECT 1 FROM reservation_attempts ra WHERE ra.attempt_id = a.attempt_id)
		FROM attempts a WHERE bucket = 'b' AND key = $1 ORDER BY created_at DESC LIMIT 1`, key).Scan(&st, &reason, &bound); err != nil {
		t.Fatal(err)
	}
	if st != lease.StateFailed || bound {
		t.Fatalf("the refused attempt: state %s (%s), bound %v; want failed and unbound", st, reason, bound)
	}
	// The lease was given back: a writer without the reservation takes the
	// key at once.
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	l3, err := m.Acquire(actx, lease.Request{Bucket: "b", Key: key, Op: "put", DeclaredSize: 1, NoWait: true})
	if err != nil {
		t.Fatalf("the key after a refused acquire: %v", err)
	}
	l3.Finish(lease.StateFailed, "test")
}

// HeldLeases counts the leases a manager holds, from the acquire until the
// lease ends by a commit, a finish or a close; a refused acquire holds
// none. The catalog's group commit reads it (meta/batch.go), and
// fencegate_leases_held shows it.
func TestHeldLeasesCountsLeasesUntilTheyEnd(t *testing.T) {
	c := catalog(t)
	m := lease.NewManager(lease.Config{TTL: 5 * time.Second, WaitMax: 50 * time.Millisecond, WaitPoll: 10 * time.Millisecond}, c, nil)
	ctx := context.Background()
	b := testenv.RandomHex(6)
	want := func(n int, after string) {
		t.Helper()
		if got := m.HeldLeases(); got != n {
			t.Fatalf("after %s: %d held leases, want %d", after, got, n)
		}
		if got := counterValue(t, m.Metrics.Held); got != float64(n) {
			t.Fatalf("after %s: fencegate_leases_held %v, want %d", after, got, n)
		}
	}
	want(0, "nothing")
	req := func(key string) lease.Request {
		return lease.Request{Bucket: b, Key: key, Op: "put", DeclaredSize: 1}
	}
	l1, err := m.Acquire(ctx, req("one"))
	if err != nil {
		t.Fatal(err)
	}
	want(1, "an acquire")
	l2, err := m.Acquire(ctx, req("two"))
	if err != nil {
		t.Fatal(err)
	}
	want(2, "a second acquire")
	if _, err := m.Acquire(ctx, req("one")); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("a writer of a held key: %v, want ErrBusy", err)
	}
	want(2, "a refused acquire")
	if _, err := l1.Commit(ctx, lease.Landed{ETag: "e", Size: 1}); err != nil {
		t.Fatal(err)
	}
	want(1, "a commit")
	l2.Finish(lease.StateFailed, "test")
	want(0, "a finish")
	l3, err := m.Acquire(ctx, req("three"))
	if err != nil {
		t.Fatal(err)
	}
	want(1, "a third acquire")
	l3.Close(false)
	l3.Close(false)
	want(0, "a close, twice")
}
