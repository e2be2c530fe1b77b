package lease_test

import (
	"context"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// countingAcquires counts the acquire round trips a Manager makes.
type countingAcquires struct {
	*meta.Catalog
	n atomic.Int64
}

func (c *countingAcquires) Acquire(ctx context.Context, p lease.AcquireParams) (*lease.Acquired, error) {
	c.n.Add(1)
	return c.Catalog.Acquire(ctx, p)
}

// A measurement, not a check (FENCEGATE_MEASURE_WAKEUPS=1 runs it): a
// writer in gateway B waits while gateway A holds the key for `hold`, then
// A commits. How long after the commit B has the key, and how many acquire
// round trips B made while it waited, with B's release listener (default
// polls: WaitPoll 50 ms, WaitPollListening 1 s) and without it (the fast
// poll alone, as before the listener). Rounds alternate between the two.
func TestMeasureCrossGatewayHandOver(t *testing.T) {
	if os.Getenv("FENCEGATE_MEASURE_WAKEUPS") == "" {
		t.Skip("a measurement: set FENCEGATE_MEASURE_WAKEUPS=1")
	}
	const rounds, hold = 30, 500 * time.Millisecond
	c := catalog(t)
	a := lease.NewManager(lease.Config{TTL: 30 * time.Second, Gateway: "gw-a"}, c, nil)
	type side struct {
		name    string
		m       *lease.Manager
		db      *countingAcquires
		waiting chan struct{}
		lat     []time.Duration
		polls   int64
	}
	mk := func(name string, listen bool) *side {
		s := &side{name: name, db: &countingAcquires{Catalog: c}, waiting: make(chan struct{}, 1)}
		s.m = lease.NewManager(lease.Config{TTL: 30 * time.Second, WaitMax: time.Minute, Gateway: "gw-" + name}, s.db, nil)
		s.m.Hooks.Waiting = func(string, string) { s.waiting <- struct{}{} }
		if listen {
			listenWith(t, s.m, c)
			waitMetric(t, "the listener", func() float64 { return gauge(t, s.m.Metrics.ListenerUp) }, 1)
		}
		return s
	}
	sides := []*side{mk("listening", true), mk("polling", false)}
	ctx := context.Background()
	for i := range 2 * rounds {
		s := sides[i%2]
		req := lease.Request{Bucket: "measure", Key: lease.NewID(), Op: "put", DeclaredSize: 1}
		held, err := a.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		before := s.db.n.Load()
		got := acquireAsync(s.m, req)
		await(t, s.waiting, "the waiter")
		time.Sleep(hold) // the holder's write; B waits meanwhile
		if _, err := held.Commit(ctx, lease.Landed{ETag: "e", Size: 1}); err != nil {
			t.Fatal(err)
		}
		committed := time.Now()
		r := await(t, got, "the waiter to get the key")
		if r.err != nil {
			t.Fatal(r.err)
		}
		s.lat = append(s.lat, r.at.Sub(committed))
		s.polls += s.db.n.Load() - before
		r.l.Fail("measured")
	}
	for _, s := range sides {
		slices.Sort(s.lat)
		t.Logf("%-9s commit -> waiter has the key: p50 %s, p90 %s, max %s; acquire round trips per wait of about %s: %.1f",
			s.name, s.lat[len(s.lat)/2].Round(100*time.Microsecond), s.lat[len(s.lat)*9/10].Round(100*time.Microsecond),
			s.lat[len(s.lat)-1].Round(100*time.Microsecond), hold, float64(s.polls)/rounds)
		for _, src := range []string{"notify", "poll", "listener"} {
			t.Logf("%-9s wake-ups by %s: %v", s.name, src, wakeups(t, s.m, src))
		}
	}
}
