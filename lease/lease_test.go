package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
	fail bool
}

func (f *failingRenewals) Renew(ctx context.Context, bucket, key, holder string, ttl time.Duration) (bool, error) {
	if f.fail {
		return false, errors.New("injected: renewal failed")
	}
	return f.Catalog.Renew(ctx, bucket, key, holder, ttl)
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
	l.Finish(meta.StateFailed, "test")
	if state(t, c, l.AttemptID) != meta.StateFailed {
		t.Fatal("attempt state not recorded")
	}
	l2, err := m.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	l2.Finish(meta.StateFailed, "test")
}

// A holder whose renewals fail loses its lease by its local deadline, before
// the lease expires on the database clock; a new writer then takes over and
// the old attempt becomes unknown; the old holder's commit is refused.
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
	drv.fail = true
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
	if s := state(t, c, old.AttemptID); s != meta.StateUnknown {
		t.Fatalf("taken-over attempt is %s, want unknown", s)
	}
	if _, err := old.Commit(ctx, lease.Landed{ETag: "x", Size: 1}); !errors.Is(err, meta.ErrLeaseLost) {
		t.Fatalf("commit by the old holder: %v, want ErrLeaseLost", err)
	}
	gen, err := newer.Commit(ctx, lease.Landed{ETag: "y", Size: 1})
	if err != nil || gen == 0 {
		t.Fatalf("commit by the new holder: %d, %v", gen, err)
	}
	if s := state(t, c, old.AttemptID); s != meta.StateFailed {
		t.Fatalf("the superseded attempt is %s, want failed", s)
	}
}
