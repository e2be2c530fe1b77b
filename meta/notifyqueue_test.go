package meta

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/internal/notify"
	"github.com/fencegate/fencegate/lease"
)

// addTestTarget adds a webhook target nothing listens for.
func addTestTarget(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO notify_targets (name, kind, url) VALUES ($1, 'webhook', 'http://127.0.0.1:1/')`, name); err != nil {
		t.Fatal(err)
	}
}

// TestATargetsClaimEndsWithItsHoldersSession: a target's delivery claim is
// held by a gateway's session. A gateway that crashed (its session expired
// unextended) or stopped (ended) gives its targets up at once, not after the
// claim's period; while its session lives no other gateway takes them; a
// holder no session row names keeps its claim for the period.
func TestATargetsClaimEndsWithItsHoldersSession(t *testing.T) {
	ctx := context.Background()
	c := &Catalog{Pool: migratedPool(t)}
	q := &Targets{Pool: c.Pool}
	claim := func(target, holder string) bool {
		t.Helper()
		held, err := q.ClaimTarget(ctx, target, holder, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return held
	}
	crashed, stopped, survivor := openTestSession(t, c), openTestSession(t, c), openTestSession(t, c)
	if !claim("crashed", crashed) || !claim("stopped", stopped) {
		t.Fatal("a free target was not claimed")
	}
	for _, target := range []string{"crashed", "stopped"} {
		if claim(target, survivor) {
			t.Fatalf("%s: taken while its holder's session is alive", target)
		}
	}
	if _, err := c.Pool.Exec(ctx, `UPDATE sessions SET expires_at = clock_timestamp() WHERE session_id = $1`, crashed); err != nil {
		t.Fatal(err)
	}
	if err := c.EndSession(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	// `fencegate status` shows a dead session's claim as free.
	addTestTarget(t, c.Pool, "crashed")
	st, err := c.ReadStatus(ctx, time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range st.Notifications {
		if ts.Name == "crashed" && ts.Holder != "" {
			t.Fatalf("status shows the crashed gateway's session %s delivering the target", ts.Holder)
		}
	}
	for target, holder := range map[string]string{"crashed": crashed, "stopped": stopped} {
		if !claim(target, survivor) {
			t.Fatalf("%s: not taken after its holder's session ended (the claim held for its whole period)", target)
		}
		if claim(target, holder) {
			t.Fatalf("%s: the dead session's gateway renewed a claim another gateway took", target)
		}
	}
	// A holder without a session row (a tool) keeps its claim for the period.
	tool := lease.NewID()
	if !claim("tool", tool) {
		t.Fatal("a free target was not claimed")
	}
	if claim("tool", survivor) {
		t.Fatal("a claim whose holder names no session was taken before its period ran out")
	}
}

// TestDueGivesEachKeyItsFirstEvent: a round sends one event per key, so the
// batch Due reads must hold each key's first due event, not the first
// `limit` rows of the queue: a key with many queued events would otherwise
// fill the batch and hold every other key back for as many rounds.
func TestDueGivesEachKeyItsFirstEvent(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	q := &Targets{Pool: pool}
	addTestTarget(t, pool, "due")
	enqueue := func(key string, gen int, due bool) {
		t.Helper()
		next := "clock_timestamp() - interval '1 s'"
		if !due {
			next = "clock_timestamp() + interval '1 h'"
		}
		if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO notify_queue (target, outbox_id, event_name, bucket, key, generation, committed_at, next_at)
			VALUES ('due', $1, 'ObjectCreated:Put', 'b', $2, $1, now(), %s)`, next), gen, key); err != nil {
			t.Fatal(err)
		}
	}
	for g := 1; g <= 5; g++ {
		enqueue("hot", g, true) // five due events of one key, queued first
	}
	enqueue("cold", 6, true)
	enqueue("waiting", 7, false) // its first event waits for a retry...
	enqueue("waiting", 8, true)  // ...so its second is not due in order
	evs, err := q.Due(ctx, "due", 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s/%d", e.Key, e.Generation))
	}
	if fmt.Sprint(got) != "[hot/1 cold/6]" {
		t.Fatalf("Due(limit 3) = %v, want each key's first due event: [hot/1 cold/6]", got)
	}
}

// TestADelivererClaimsUnderItsCurrentSession: a gateway whose session died
// (PostgreSQL out of reach past the timeout) opens a new one and keeps
// delivering; its targets' claims must move to the new session. Held under
// the dead one, any gateway could take them at any poll, and two gateways
// whose sessions were both replaced (a PostgreSQL restart) would take a
// target from each other at every poll, both delivering.
func TestADelivererClaimsUnderItsCurrentSession(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Catalog{Pool: migratedPool(t)}
	target := "current-" + lease.NewID()[:8]
	addTestTarget(t, c.Pool, target)
	first, second, other := openTestSession(t, c), openTestSession(t, c), openTestSession(t, c)
	var current atomic.Value
	current.Store(first)
	svc := notify.NewService(notify.Config{Poll: 20 * time.Millisecond, ClaimFor: 300 * time.Millisecond},
		&Targets{Pool: c.Pool}, func() string { return current.Load().(string) }, nil)
	svc.Start(ctx)
	t.Cleanup(func() { cancel(); svc.Wait() })
	holderIs := func(want string) {
		t.Helper()
		var got string
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if err := c.Pool.QueryRow(ctx, `SELECT coalesce((SELECT holder::text FROM notify_claims WHERE target = $1), '')`, target).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got == want {
				return
			}
		}
		t.Fatalf("the target's claim is held by %q, not %q", got, want)
	}
	holderIs(first)
	// The first session expires; the gateway opens the second.
	if _, err := c.Pool.Exec(ctx, `UPDATE sessions SET expires_at = clock_timestamp() WHERE session_id = $1`, first); err != nil {
		t.Fatal(err)
	}
	current.Store(second)
	holderIs(second)
	if held, err := (&Targets{Pool: c.Pool}).ClaimTarget(ctx, target, other, time.Hour); err != nil || held {
		t.Fatalf("another gateway took the target from a live session's deliverer: %v %v", held, err)
	}
}
