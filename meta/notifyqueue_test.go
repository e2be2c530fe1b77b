package meta

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// TestATargetsClaimEndsWithItsHoldersSession: a target's delivery claim is
// held by a gateway's session. A gateway that crashed (its session expired
// unextended) or stopped (ended) gives its targets up at once, not after the
// claim's period; while its session lives no other gateway takes them; a
// holder no session row names keeps its claim for the period.
func TestATargetsClaimEndsWithItsHoldersSession(t *testing.T) {
	ctx := context.Background()
	c := &Catalog{Pool: migratedPool(t)}
	q := &Targets{Pool: c.Pool}
	session := func() string {
		id, err := c.OpenSession(ctx, "gw-"+lease.NewID()[:8], time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.EndSession(ctx, id) })
		return id
	}
	claim := func(target, holder string) bool {
		t.Helper()
		held, err := q.ClaimTarget(ctx, target, holder, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return held
	}
	crashed, stopped, survivor := session(), session(), session()
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
	if _, err := pool.Exec(ctx, `INSERT INTO notify_targets (name, kind, url) VALUES ('due', 'webhook', 'http://127.0.0.1:1/')`); err != nil {
		t.Fatal(err)
	}
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
