package lease_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// Pruning removes only what its retention allows: settled attempts older
// than their retention that nothing points at, outbox rows below every
// consumer's acknowledgement and older than theirs, idle lease rows of keys
// without live work. An unknown guard older than every retention stays.
func TestPruneRespectsRetention(t *testing.T) {
	c := catalog(t)
	m := lease.NewManager(recLease, c, nil)
	ctx := context.Background()
	bucket := "prune-" + lease.NewID()[:8]
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := c.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	attempt := func(key, state string, age time.Duration) string {
		id := lease.NewID()
		exec(`INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, created_at, updated_at)
			VALUES ($1, $2, $3, 'put', $4, 'test', clock_timestamp() - $5::interval, clock_timestamp() - $5::interval)`,
			id, bucket, key, state, age.String())
		return id
	}
	oldFailed := attempt("a", lease.StateFailed, 48*time.Hour)
	newFailed := attempt("a", lease.StateFailed, time.Hour)
	oldUnknown := attempt("guarded", lease.StateUnknown, 100*24*time.Hour)
	current := attempt("c", lease.StateCommitted, 48*time.Hour)
	exec(`INSERT INTO catalog (bucket, key, generation, etag, size, attempt_id, origin, committed_at)
		VALUES ($1, 'c', nextval('generation_seq'), 'e', 1, $2, 'fencegate', clock_timestamp())`, bucket, current)
	// Lease rows: an idle free one, and one of the guarded key.
	exec(`INSERT INTO leases (bucket, key) VALUES ($1, 'idle'), ($1, 'guarded')`, bucket)
	// Outbox rows: two old, one new; a consumer acknowledged up to the second.
	var ids [3]int64
	for i, age := range []string{"2 hours", "2 hours", "0 hours"} {
		if err := c.Pool.QueryRow(ctx, `INSERT INTO outbox (bucket, key, generation, deleted, origin, committed_at)
			VALUES ($1, 'o', 1, false, 'fencegate', clock_timestamp() - $2::interval) RETURNING id`, bucket, age).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	outboxLeft := func() int {
		var n int
		if err := c.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE bucket = $1`, bucket).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cfg := lease.LifecycleConfig{Kinds: []string{lease.KindPrune},
		Retention: lease.Retention{Attempts: 24 * time.Hour, Outbox: time.Hour, Leases: time.Hour}}
	s := service(t, c, m, newLifeStore(), cfg)
	// No consumer has acknowledged anything: no outbox row goes.
	exec(`INSERT INTO reconciler_passes (kind, gateway, started_at, duration_ms, batches, claimed, completed, retried, skipped, failed)
		VALUES ('prune', $1, clock_timestamp() - interval '2 hours', 1, 1, 0, 0, 0, 0, 0)`, "gone-"+bucket)
	exec(`DELETE FROM outbox_consumers`)
	s.RunOnce(ctx)
	if n := outboxLeft(); n != 3 {
		t.Fatalf("%d outbox rows left with no consumer registered, want all 3", n)
	}
	exec(`INSERT INTO outbox_consumers (consumer, acked_id) VALUES ('indexer', $1), ('mirror', $2)`, ids[2], ids[1])
	pass := s.RunOnce(ctx)
	t.Logf("prune pass: %+v", pass.Kind(lease.KindPrune))
	if n := outboxLeft(); n != 1 {
		t.Fatalf("%d outbox rows left, want 1 (the two old ones both consumers acknowledged are pruned, the new one stays)", n)
	}
	exists := func(sql string, args ...any) bool {
		var ok bool
		if err := c.Pool.QueryRow(ctx, `SELECT EXISTS (`+sql+`)`, args...).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, tc := range []struct {
		id   string
		keep bool
		what string
	}{
		{oldFailed, false, "a failed attempt past its retention"},
		{newFailed, true, "a failed attempt within its retention"},
		{oldUnknown, true, "an unknown guard older than every retention"},
		{current, true, "the attempt the catalog's row points at"},
	} {
		if got := exists(`SELECT 1 FROM attempts WHERE attempt_id = $1`, tc.id); got != tc.keep {
			t.Errorf("%s: kept %v, want %v", tc.what, got, tc.keep)
		}
	}
	if exists(`SELECT 1 FROM leases WHERE bucket = $1 AND key = 'idle'`, bucket) {
		t.Error("an idle lease row of a key without attempts was kept")
	}
	if !exists(`SELECT 1 FROM leases WHERE bucket = $1 AND key = 'guarded'`, bucket) {
		t.Error("the lease row of a key with an unknown guard was pruned")
	}
	if exists(`SELECT 1 FROM reconciler_passes WHERE gateway = $1`, "gone-"+bucket) {
		t.Error("the last pass of a gateway gone past the lease retention is still reported")
	}
	exec(`DELETE FROM outbox_consumers`)
}

// Pruning deletes reservations ended past the attempts' retention, with
// their events: expired and cancelled ones once swept, committed ones whose
// object left the account's used bytes or that count against no account.
// A live one, one not yet swept, one ended recently and a committed one whose
// object an account still pays for stay.
func TestPruneReservations(t *testing.T) {
	c := catalog(t)
	m := lease.NewManager(recLease, c, nil)
	ctx := context.Background()
	bucket := "prune-resv-" + lease.NewID()[:8]
	account := "prune-" + lease.NewID()[:8]
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := c.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO quotas (account, limit_bytes) VALUES ($1, 100)`, account)
	n := 0
	reservation := func(state string, endedAgo time.Duration, swept, released, withAccount bool) string {
		t.Helper()
		n++
		id := lease.NewID()
		var acct *string
		if withAccount {
			acct = &account
		}
		var ended *string
		if state != "reserved" {
			e := endedAgo.String()
			ended = &e
		}
		exec(`INSERT INTO reservations (reservation_id, bucket, key, access_key_id, account, reserved_bytes, request_hash,
				state, expires_at, ended_at, swept_at, released_at)
			VALUES ($1, $2, $3, 'k', $4, 1, 'h', $5, clock_timestamp() + interval '1 hour',
				clock_timestamp() - $6::interval,
				CASE WHEN $7 THEN clock_timestamp() END, CASE WHEN $8 THEN clock_timestamp() END)`,
			id, bucket, "k"+strconv.Itoa(n), acct, state, ended, swept, released)
		exec(`INSERT INTO reservation_events (reservation_id, event, bucket, key) VALUES ($1, 'reservation.created', $2, 'k')`, id, bucket)
		return id
	}
	old := 48 * time.Hour
	cases := []struct {
		id   string
		keep bool
		what string
	}{
		{reservation("expired", old, true, false, true), false, "an expired reservation swept past the retention"},
		{reservation("cancelled", old, true, false, false), false, "a cancelled reservation swept past the retention"},
		{reservation("committed", old, false, true, true), false, "a committed reservation whose object was replaced"},
		{reservation("committed", old, false, false, false), false, "a committed reservation without an account"},
		{reservation("expired", old, false, false, true), true, "an expired reservation not yet swept"},
		{reservation("cancelled", time.Hour, true, false, true), true, "a reservation ended within the retention"},
		{reservation("committed", old, false, false, true), true, "a committed reservation whose object an account pays for"},
		{reservation("reserved", 0, false, false, true), true, "a live reservation"},
	}
	cfg := lease.LifecycleConfig{Kinds: []string{lease.KindPrune}, Retention: lease.Retention{Attempts: 24 * time.Hour}}
	s := service(t, c, m, newLifeStore(), cfg)
	s.RunOnce(ctx)
	for _, tc := range cases {
		var row, events bool
		if err := c.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM reservations WHERE reservation_id = $1),
			EXISTS (SELECT 1 FROM reservation_events WHERE reservation_id = $1)`, tc.id).Scan(&row, &events); err != nil {
			t.Fatal(err)
		}
		if row != tc.keep || events != tc.keep {
			t.Errorf("%s: row kept %v, events kept %v, want %v", tc.what, row, events, tc.keep)
		}
	}
}
