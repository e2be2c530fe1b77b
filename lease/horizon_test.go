package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// An unknown attempt stays a guard until its horizon has passed: a settle
// before then leaves it unknown whatever it finds; the first settle whose
// HEAD comes after the horizon closes it, failed, with the reason the chaos
// checker reads, unless that HEAD finds its bytes (then it is adopted)
// (issue 27, item 9).
func TestGuardClosedOnlyPastItsHorizon(t *testing.T) {
	c := catalog(t)
	cfg := recLease
	cfg.GuardHorizon = 1500 * time.Millisecond
	m := lease.NewManager(cfg, c, nil)
	st := newLandedStore()
	ctx := context.Background()
	bucket := "horizon-" + lease.NewID()[:8]
	unknown := func(key string) string {
		l, err := m.Acquire(ctx, lease.Request{Bucket: bucket, Key: key, Op: "put", DeclaredSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		l.Finish(lease.StateUnknown, "test: the store's answer was lost")
		return l.AttemptID
	}
	gone, landed := unknown("gone"), unknown("landed")
	for _, k := range []string{"gone", "landed"} {
		if err := m.SettleKey(ctx, bucket, k, st, true); err != nil {
			t.Fatal(err)
		}
	}
	if s := state(t, c, gone); s != lease.StateUnknown {
		t.Fatalf("before its horizon a guard whose bytes were not found is %s, want unknown", s)
	}
	time.Sleep(cfg.GuardHorizon + 200*time.Millisecond)
	st.land(bucket, "landed", landed, 10)
	for _, k := range []string{"gone", "landed"} {
		if err := m.SettleKey(ctx, bucket, k, st, true); err != nil {
			t.Fatal(err)
		}
	}
	a, err := c.AttemptByID(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != lease.StateFailed {
		t.Fatalf("past its horizon, the guard is %s, want failed", a.State)
	}
	var reason string
	if err := c.Pool.QueryRow(ctx, `SELECT reason FROM attempts WHERE attempt_id = $1`, gone).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(reason, "past its horizon") {
		t.Fatalf("closed with reason %q", reason)
	}
	if s := state(t, c, landed); s != lease.StateAdopted {
		t.Fatalf("a guard whose bytes the HEAD past its horizon found is %s, want adopted", s)
	}
}
