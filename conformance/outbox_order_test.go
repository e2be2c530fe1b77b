package conformance

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
)

// The outbox's out-of-order case, forced: writer A's commit draws its outbox
// id, then waits (on a lock the test holds on A's attempt row, seen in
// pg_locks); writer B commits a higher id meanwhile and a consumer takes B's
// event. A's event then becomes visible below the consumer's highest id so
// far. The documented consumer (delete-claim, oldest first, SKIP LOCKED)
// still gets it; a `WHERE id > cursor` reader would have skipped it.
func TestOutboxLateCommitBelowCursorIsConsumed(t *testing.T) {
	pool := packageKeys(t).Pool
	ctx := context.Background()
	bucket := "t-outbox-order-" + randomSuffix()
	locked := make(chan pgx.Tx, 1)
	var lockErr error
	g := startGateway(t, gatewayOptions{Lease: testLease, Hooks: armOnKey(bucket, "a", func(attempt string) {
		tx, err := pool.Begin(ctx)
		if err == nil {
			_, err = tx.Exec(ctx, `SELECT 1 FROM attempts WHERE attempt_id = $1 FOR UPDATE`, attempt)
		}
		lockErr = err
		locked <- tx
	})})
	createBucket(t, g.Endpoint, bucket)
	resA := make(chan rawResult, 1)
	go func() { resA <- putRaw(g.Endpoint, bucket, "a", []byte("A, committed late"), nil) }()
	var tx pgx.Tx
	select {
	case tx = <-locked:
	case <-time.After(30 * time.Second):
		t.Fatal("A never reached its commit")
	}
	if lockErr != nil {
		t.Fatal(lockErr)
	}
	defer tx.Rollback(ctx)
	waitFor(t, "A's commit to wait on its attempt row, its outbox row written", 10*time.Second, func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND a.query ILIKE '%fencegate_commit%'`).Scan(&n)
		return n > 0
	})
	if b := putRaw(g.Endpoint, bucket, "b", []byte("B"), nil); b.Status != 200 {
		t.Fatalf("B: %+v", b)
	}

	consumer, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close(ctx)
	claim := func() []outboxEvent {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var evs []outboxEvent
		err := pgx.BeginFunc(ctx, consumer, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `DELETE FROM outbox WHERE id IN (
					SELECT id FROM outbox WHERE bucket = $1 ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED)
				RETURNING id, key, generation`, bucket)
			if err != nil {
				return err
			}
			evs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxEvent, error) {
				var e outboxEvent
				return e, r.Scan(&e.id, &e.key, &e.generation)
			})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Slice(evs, func(i, j int) bool { return evs[i].id < evs[j].id })
		return evs
	}
	first := claim()
	if len(first) != 1 || first[0].key != "b" {
		t.Fatalf("first batch %+v, want B's event only (A's is not committed)", first)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-resA; a.Status != 200 {
		t.Fatalf("A: %+v", a)
	}
	second := claim()
	if len(second) != 1 || second[0].key != "a" {
		t.Fatalf("second batch %+v, want A's event", second)
	}
	if second[0].id >= first[0].id {
		t.Fatalf("A's event id %d is not below B's %d: the out-of-order case did not happen", second[0].id, first[0].id)
	}
	if rest := claim(); len(rest) != 0 {
		t.Fatalf("events left: %+v", rest)
	}
}

// armOnKey returns hooks that call arm once, with the attempt id, at the
// first commit of bucket/key.
func armOnKey(bucket, key string, arm func(attempt string)) lease.Hooks {
	fired := make(chan struct{}, 1)
	return lease.Hooks{BeforeCommit: func(b, k, attempt string) {
		if b != bucket || k != key {
			return
		}
		select {
		case fired <- struct{}{}:
			arm(attempt)
		default:
		}
	}}
}
