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

// lostAcquireAnswers stands in front of the real catalog: while lose is set,
// an Acquire is applied by PostgreSQL and then its answer is lost (the
// connection drops after the commit).
type lostAcquireAnswers struct {
	*meta.Catalog
	lose    atomic.Bool
	applied atomic.Int64 // acquires applied and then reported failed
}

func (d *lostAcquireAnswers) Acquire(ctx context.Context, p lease.AcquireParams) (*lease.Acquired, error) {
	acq, err := d.Catalog.Acquire(ctx, p)
	if d.lose.Load() {
		var held *lease.Held
		if err == nil || !errors.As(err, &held) {
			d.applied.Add(1)
			return nil, errors.New("injected: the acquire's answer was lost after its commit")
		}
	}
	return acq, err
}

// An acquire whose answer is lost after PostgreSQL applied it does not orphan
// the key until the TTL runs out: the writer gives the lease back, so another
// gateway's writer gets the key at once (issue 27, item 3).
func TestLostAcquireAnswerFreesKey(t *testing.T) {
	c := catalog(t)
	drv := &lostAcquireAnswers{Catalog: c}
	cfg := lease.Config{TTL: 30 * time.Second, WaitMax: 300 * time.Millisecond, WaitPoll: 20 * time.Millisecond}
	m := lease.NewManager(cfg, drv, nil)
	other := lease.NewManager(cfg, c, nil)
	ctx := context.Background()
	req := lease.Request{Bucket: "b", Key: "lost-acquire-" + lease.NewID(), Op: "put", DeclaredSize: 1}
	drv.lose.Store(true)
	if _, err := m.Acquire(ctx, req); err == nil {
		t.Fatal("the acquire whose answer was lost succeeded")
	}
	if drv.applied.Load() != 1 {
		t.Fatalf("acquires applied and lost: %d, want 1", drv.applied.Load())
	}
	drv.lose.Store(false)
	l, err := other.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("another writer after a lost acquire answer: %v, want the key (not held until the %s TTL)", err, cfg.TTL)
	}
	l.Finish(lease.StateFailed, "test")
}

// An acquire repeated by the lease's own holder (the first answer was lost,
// or a commit handed the key to it and that answer was lost) returns the
// lease it holds, instead of refusing it as held by someone else.
func TestAcquireRepeatedByItsHolder(t *testing.T) {
	c := catalog(t)
	ctx := context.Background()
	p := lease.AcquireParams{Bucket: "b", Key: "again-" + lease.NewID(), TTL: 30 * time.Second,
		Attempt: lease.Attempt{ID: lease.NewID(), Op: "put", Gateway: "g", DeclaredSize: 1}}
	if _, err := c.Acquire(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, p); err != nil {
		t.Fatalf("the holder's repeated acquire: %v, want the lease it holds", err)
	}
	other := p
	other.Attempt.ID = lease.NewID()
	var held *lease.Held
	if _, err := c.Acquire(ctx, other); !errors.As(err, &held) {
		t.Fatalf("another writer's acquire: %v, want held", err)
	}
	if s := state(t, c, p.Attempt.ID); s != lease.StateLeased {
		t.Fatalf("the holder's attempt is %s, want leased", s)
	}
}
