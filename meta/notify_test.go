package meta

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/internal/testenv"
)

// Commits that come one a millisecond (a gateway writing steadily) wake the
// outbox's consumers with every key's payload, in a few statements: at most
// one per outboxNotifyEvery, the first at once. Each statement is a
// transaction of its own with an id; sent per commit, they were most of a
// small PUT's write transactions (docs/COST.md).
func TestOutboxWakeupsPaced(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	listener, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN "+outboxChannel); err != nil {
		t.Fatal(err)
	}
	next := func() (*pgconn.Notification, error) {
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return listener.WaitForNotification(waitCtx)
	}
	n := &outboxNotifier{pool: pool}

	// A lone commit's wake-up goes at once.
	start := time.Now()
	n.notify("b/first")
	note, err := next()
	if err != nil || note.Payload != "b/first" {
		t.Fatalf("first wake-up: %v %+v", err, note)
	}
	if d := time.Since(start); d > outboxNotifyEvery+50*time.Millisecond {
		t.Errorf("a lone wake-up took %v", d)
	}
	time.Sleep(2 * outboxNotifyEvery) // the sender exits, idle

	sends0 := n.sends.Load()
	const commits = 60
	want := map[string]bool{}
	start = time.Now()
	for i := range commits {
		p := fmt.Sprintf("b/k%d", i%20) // keys written again: one wake-up each per statement
		want[p] = true
		n.notify(p)
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	got := map[string]bool{}
	for len(got) < len(want) {
		note, err := next()
		if err != nil {
			t.Fatalf("%d of %d payloads received: %v", len(got), len(want), err)
		}
		got[note.Payload] = true
	}
	time.Sleep(2 * outboxNotifyEvery)
	sends := n.sends.Load() - sends0
	// At most one statement per interval, plus the first and one after an
	// idle sender restarts.
	if limit := int64(elapsed/outboxNotifyEvery) + 3; sends > limit {
		t.Errorf("%d commits over %v woke consumers in %d statements, want at most %d", commits, elapsed, sends, limit)
	}
	t.Logf("%d commits over %v: %d statements", commits, elapsed.Round(time.Millisecond), sends)
}
