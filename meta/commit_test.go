package meta

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
)

// A guard whose settling failed and was claimed again carries the reason and
// the claim; the commit that adopts it clears them with the rest of its
// claim (migration 0020), so an adopted attempt no longer shows the store
// error of a try that came before. Its tries stay as its history.
func TestCommitClearsTheSettledAttemptsRetryState(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	ctx := context.Background()
	b := testenv.RandomHex(6)
	sid := openTestSession(t, c)
	guard := lease.NewID()
	if _, err := c.Pool.Exec(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, declared_size)
		VALUES ($1, $2, 'k', 'put', 'unknown', 'gw', 1)`, guard, b); err != nil {
		t.Fatal(err)
	}
	if err := c.RetryKeyLater(ctx, b, "k", 0, 0, "store down"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pool.Exec(ctx, `UPDATE attempts SET claim_session = $2, claim_token = gen_random_uuid(),
		claimed_until = clock_timestamp() + interval '1 minute', tries = 3 WHERE attempt_id = $1`, guard, sid); err != nil {
		t.Fatal(err)
	}
	retryState := func() (lastError string, claimed bool, tries int) {
		t.Helper()
		if err := c.Pool.QueryRow(ctx, `SELECT coalesce(last_error, ''),
				claim_session IS NOT NULL OR claim_token IS NOT NULL OR claimed_until IS NOT NULL, tries
			FROM attempts WHERE attempt_id = $1`, guard).Scan(&lastError, &claimed, &tries); err != nil {
			t.Fatal(err)
		}
		return
	}
	if e, claimed, _ := retryState(); e != "store down" || !claimed {
		t.Fatalf("before the adoption: last_error %q, claimed %v; want the failed try's and claimed", e, claimed)
	}

	settler := lease.NewID()
	if _, err := c.Acquire(ctx, lease.AcquireParams{Bucket: b, Key: "k", TTL: time.Minute, NoAttempt: true,
		Attempt: lease.Attempt{ID: settler, Op: "put", Gateway: "gw"}}); err != nil {
		t.Fatal(err)
	}
	gen, err := c.Commit(ctx, lease.CommitParams{Bucket: b, Key: "k", Holder: settler,
		Settled: guard, SettledState: lease.StateAdopted, Release: true,
		Entry: lease.Entry{ETag: "e", Size: 1, AttemptID: guard, Origin: lease.OriginAdopted}})
	if err != nil || gen == 0 {
		t.Fatalf("the adoption's commit: generation %d, %v", gen, err)
	}
	var state string
	if err := c.Pool.QueryRow(ctx, `SELECT state FROM attempts WHERE attempt_id = $1`, guard).Scan(&state); err != nil {
		t.Fatal(err)
	}
	e, claimed, tries := retryState()
	if state != lease.StateAdopted || e != "" || claimed || tries != 3 {
		t.Fatalf("after the adoption: state %s, last_error %q, claimed %v, tries %d; want adopted, none, unclaimed, 3",
			state, e, claimed, tries)
	}
}
