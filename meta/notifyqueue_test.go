package meta

import (
	"context"
	"fmt"
	"testing"
)

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
