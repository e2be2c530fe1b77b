package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

func ptr[T any](v T) *T { return &v }

// TestQuotaRaceNeverExceeds: 64 reservations race for an account with room
// for 10 of them; exactly 10 win and reserved bytes end at the limit.
func TestQuotaRaceNeverExceeds(t *testing.T) {
	ctx := context.Background()
	s := &Reservations{Pool: migratedPool(t)}
	if err := s.SetQuota(ctx, "race", 1000, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, refused := 0, 0
	start := make(chan struct{})
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.Create(ctx, ReservationRequest{Bucket: "qb", Key: "race/" + string(rune('A'+i%26)) + string(rune('a'+i/26)),
				AccessKeyID: "K", Account: "race", ExactSize: ptr[int64](100), TTL: time.Minute})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrQuotaExceeded):
				refused++
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	q, err := s.GetQuota(ctx, "race")
	if err != nil {
		t.Fatal(err)
	}
	if won != 10 || refused != 54 || q.ReservedBytes != 1000 {
		t.Fatalf("won %d refused %d reserved %d; want 10, 54, 1000", won, refused, q.ReservedBytes)
	}
}

func TestReservationIdempotency(t *testing.T) {
	ctx := context.Background()
	s := &Reservations{Pool: migratedPool(t)}
	q := ReservationRequest{Bucket: "ib", Key: "k1", AccessKeyID: "K", ExactSize: ptr[int64](5), IdempotencyKey: "i-1", TTL: time.Minute}
	a, err := s.Create(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, q)
	if err != nil || b.ID != a.ID {
		t.Fatalf("repeat: %v %s vs %s", err, b.ID, a.ID)
	}
	q.ExactSize = ptr[int64](6)
	if _, err := s.Create(ctx, q); !errors.Is(err, ErrIdempotencyReused) {
		t.Fatalf("different request: %v, want ErrIdempotencyReused", err)
	}
	q.IdempotencyKey = ""
	if _, err := s.Create(ctx, q); !errors.Is(err, ErrKeyReserved) {
		t.Fatalf("second reservation of a live key: %v, want ErrKeyReserved", err)
	}
}

// TestReservationCommitTrigger: a generation of a bound attempt commits the
// reservation and moves its quota; a second one, or one after the
// reservation ended, does not commit; an overwrite releases used bytes.
func TestReservationCommitTrigger(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Reservations{Pool: pool}
	if err := s.SetQuota(ctx, "acct", 100, nil); err != nil {
		t.Fatal(err)
	}
	gen := func(key, attempt string, size int64, deleted bool) error {
		_, err := pool.Exec(ctx, `WITH g AS (INSERT INTO generations (bucket, key, generation, etag, size, attempt_id, deleted, origin)
			VALUES ('tb', $1, nextval('generation_seq'), 'e', $2, $3, $4, 'fencegate') RETURNING *)
			INSERT INTO catalog SELECT bucket, key, generation, etag, size, attempt_id, deleted, origin, committed_at FROM g
			ON CONFLICT (bucket, key) DO UPDATE SET generation = EXCLUDED.generation, size = EXCLUDED.size, deleted = EXCLUDED.deleted`,
			key, size, nullID(attempt), deleted)
		return err
	}
	r, err := s.Create(ctx, ReservationRequest{Bucket: "tb", Key: "a", AccessKeyID: "K", Account: "acct", MaxSize: ptr[int64](40), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	a1, a2 := newUUID(), newUUID()
	for _, a := range []string{a1, a2} {
		if ok, err := s.Bind(ctx, r.ID, a, "tb", "a"); !ok || err != nil {
			t.Fatalf("bind: %v %v", ok, err)
		}
	}
	if err := gen("a", "", 10, false); err == nil {
		t.Fatal("an unbound write to a reserved key committed")
	}
	if err := gen("a", a1, 41, false); err == nil {
		t.Fatal("a write over the maximum committed")
	}
	if err := gen("a", a1, 30, false); err != nil {
		t.Fatal(err)
	}
	if err := gen("a", a2, 30, false); err == nil {
		t.Fatal("a second publication of one reservation committed")
	}
	got, _ := s.Get(ctx, r.ID)
	q, _ := s.GetQuota(ctx, "acct")
	if got.State != ReservationCommitted || *got.Size != 30 || q.ReservedBytes != 0 || q.UsedBytes != 30 {
		t.Fatalf("after commit: %+v %+v", got, q)
	}
	if err := gen("a", "", -1, true); err != nil {
		t.Fatal(err)
	}
	if q, _ = s.GetQuota(ctx, "acct"); q.UsedBytes != 0 {
		t.Fatalf("after delete: used %d, want 0", q.UsedBytes)
	}

	r2, err := s.Create(ctx, ReservationRequest{Bucket: "tb", Key: "b", AccessKeyID: "K", Account: "acct", ExactSize: ptr[int64](7), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	a3 := newUUID()
	if ok, _ := s.Bind(ctx, r2.ID, a3, "tb", "b"); !ok {
		t.Fatal("bind failed")
	}
	if _, err := s.End(ctx, r2.ID, ReservationCancelled); err != nil {
		t.Fatal(err)
	}
	if err := gen("b", a3, 7, false); err == nil {
		t.Fatal("a write under a cancelled reservation committed")
	}
	if ok, _ := s.Bind(ctx, r2.ID, newUUID(), "tb", "b"); ok {
		t.Fatal("bound to a cancelled reservation")
	}
	if _, err := s.End(ctx, r2.ID, ReservationCancelled); !errors.Is(err, ErrReservationEnded) {
		t.Fatalf("second cancel: %v", err)
	}
	if q, _ = s.GetQuota(ctx, "acct"); q.ReservedBytes != 0 {
		t.Fatalf("after cancel: reserved %d, want 0", q.ReservedBytes)
	}
}

// TestReservationCommitVersusSweep: a commit whose transaction took the
// reservation before its expiry, still open when a sweep runs after the
// expiry, wins: the sweep skips the row and ends nothing, and the
// reservation is committed. A sweep that ends the reservation first makes
// the commit fail.
func TestReservationCommitVersusSweep(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Reservations{Pool: pool}
	c := &Catalog{Pool: pool}
	if _, err := pool.Exec(ctx, `UPDATE reservations SET state = 'cancelled' WHERE state = 'reserved'`); err != nil {
		t.Fatal(err)
	}
	insertGen := `INSERT INTO generations (bucket, key, generation, etag, size, attempt_id, deleted, origin)
		VALUES ('sw', $1, nextval('generation_seq'), 'e', 1, $2, false, 'fencegate')`

	won, err := s.Create(ctx, ReservationRequest{Bucket: "sw", Key: "commit-first", AccessKeyID: "K", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a := newUUID()
	if ok, _ := s.Bind(ctx, won.ID, a, "sw", "commit-first"); !ok {
		t.Fatal("bind")
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, insertGen, "commit-first", a); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(won.ExpiresAt) + 100*time.Millisecond)
	if n, err := c.ExpireReservations(ctx, 100); err != nil || n != 0 {
		t.Fatalf("sweep during the commit ended %d (%v), want 0", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.ExpireReservations(ctx, 100); err != nil || n != 0 {
		t.Fatalf("sweep after the commit ended %d (%v), want 0", n, err)
	}
	if got, _ := s.Get(ctx, won.ID); got.State != ReservationCommitted {
		t.Fatalf("state %s, want committed", got.State)
	}

	lost, err := s.Create(ctx, ReservationRequest{Bucket: "sw", Key: "sweep-first", AccessKeyID: "K", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b := newUUID()
	if ok, _ := s.Bind(ctx, lost.ID, b, "sw", "sweep-first"); !ok {
		t.Fatal("bind")
	}
	time.Sleep(time.Until(lost.ExpiresAt) + 100*time.Millisecond)
	if n, err := c.ExpireReservations(ctx, 100); err != nil || n != 1 {
		t.Fatalf("sweep ended %d (%v), want 1", n, err)
	}
	if _, err := pool.Exec(ctx, insertGen, "sweep-first", b); err == nil {
		t.Fatal("a write under a swept reservation committed")
	}
	if got, _ := s.Get(ctx, lost.ID); got.State != ReservationExpired {
		t.Fatalf("state %s, want expired", got.State)
	}
}

// An ended reservation with an attempt still unknown (a write that may yet
// land, held somewhere) is not marked swept: the sweeper keeps its claim and
// comes back, so bytes that land late are deleted too. Once the attempt is
// resolved it is swept.
func TestReservationNotSweptWhileAnAttemptIsOpen(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	s := &Reservations{Pool: pool}
	c := &Catalog{Pool: pool}
	r, err := s.Create(ctx, ReservationRequest{Bucket: "open", Key: "late", AccessKeyID: "K", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	a := newUUID()
	if ok, _ := s.Bind(ctx, r.ID, a, "open", "late"); !ok {
		t.Fatal("bind")
	}
	if _, err := pool.Exec(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway)
		VALUES ($1, 'open', 'late', 'put', 'unknown', 'g')`, a); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT fencegate_reservation_end($1, 'cancelled', false)`, r.ID); err != nil {
		t.Fatal(err)
	}
	claimed, err := c.ClaimEndedReservations(ctx, 100, lease.Claim{For: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(claimed, func(e lease.EndedReservation) bool { return e.ID == r.ID }) {
		t.Fatalf("the cancelled reservation with an unknown attempt was not claimed: %+v", claimed)
	}
	if err := c.ReservationSwept(ctx, r.ID); !errors.Is(err, lease.ErrReservationAttemptsOpen) {
		t.Fatalf("swept with an unknown attempt: %v, want ErrReservationAttemptsOpen", err)
	}
	var swept bool
	if err := pool.QueryRow(ctx, `SELECT swept_at IS NOT NULL FROM reservations WHERE reservation_id = $1`, r.ID).Scan(&swept); err != nil || swept {
		t.Fatalf("swept_at set (%v, %v) while an attempt may land", swept, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE attempts SET state = 'failed' WHERE attempt_id = $1`, a); err != nil {
		t.Fatal(err)
	}
	if err := c.ReservationSwept(ctx, r.ID); err != nil {
		t.Fatalf("swept once the attempt failed: %v", err)
	}
}

// TestCreatesInFlightMeanwhileShareOneTransaction: creates that come while
// one is in flight go together in the next batch, one transaction taking
// the account's quota row once (the first batch is held before it is sent
// while five more come). A batch one of whose creates fails (here: the
// account has room for all but the last; another repeats an idempotency key
// of the same batch) is sent again one create at a time, so each gets its
// own answer: the over-quota one ErrQuotaExceeded (it fits in no order),
// the repeat the same
// reservation, the rest made, and the quota exact.
func TestCreatesInFlightMeanwhileShareOneTransaction(t *testing.T) {
	ctx := context.Background()
	s := &Reservations{Pool: migratedPool(t)}
	account := "batch-" + newUUID()
	if err := s.SetQuota(ctx, account, 600, nil); err != nil {
		t.Fatal(err)
	}
	sends, release := holdBatches(&s.creates)
	create := func(key, idem string, size int64) (Reservation, error) {
		if idem != "" {
			idem += "-" + account // idempotency keys are the access key's, across runs
		}
		return s.Create(ctx, ReservationRequest{Bucket: account, Key: key, AccessKeyID: "K", Account: account,
			ExactSize: ptr(size), IdempotencyKey: idem, TTL: time.Minute})
	}
	type result struct {
		r   Reservation
		err error
	}
	first := make(chan result, 1)
	go func() { r, err := create("first", "", 100); first <- result{r, err} }()
	select {
	case n := <-sends:
		if n != 1 {
			t.Fatalf("the first batch carries %d creates, want 1", n)
		}
	case r := <-first:
		t.Fatalf("the first create went without a batch: %+v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("no batch of creates was sent in 10 s")
	}
	results := make([]result, 5)
	var wg sync.WaitGroup
	for i, c := range []struct {
		key, idem string
		size      int64
	}{{"b1", "", 100}, {"b2", "", 100}, {"rep", "same", 100}, {"rep", "same", 100}, {"over", "", 501}} {
		wg.Add(1)
		go func() { defer wg.Done(); r, err := create(c.key, c.idem, c.size); results[i] = result{r, err} }()
	}
	waitQueued(t, &s.creates, 5)
	release()
	wg.Wait()
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	if n := <-sends; n != 5 {
		t.Fatalf("the second batch carries %d creates, want 5", n)
	}
	calls, batches, resent := s.creates.calls, s.creates.batches, s.creates.resent
	if calls != 6 || batches != 2 || resent != 5 {
		t.Fatalf("%d creates in %d batches, %d resent; want 6 in 2, the failed batch's 5 resent", calls, batches, resent)
	}
	for i := range 4 {
		if results[i].err != nil {
			t.Fatalf("create %d: %v", i, results[i].err)
		}
	}
	if results[2].r.ID != results[3].r.ID {
		t.Fatalf("an idempotent repeat made another reservation: %s, %s", results[2].r.ID, results[3].r.ID)
	}
	if !errors.Is(results[4].err, ErrQuotaExceeded) {
		t.Fatalf("the create past the limit: %v, want ErrQuotaExceeded", results[4].err)
	}
	if q, err := s.GetQuota(ctx, account); err != nil || q.ReservedBytes != 400 || q.ReservedObjects != 4 {
		t.Fatalf("quota %+v (%v): want 400 B and 4 objects reserved", q, err)
	}

	// Without a failure, nothing is sent again: 16 concurrent creates, all
	// made, in batches that all committed.
	s.creates.beforeSend = nil
	if err := s.SetQuota(ctx, account, 10000, nil); err != nil {
		t.Fatal(err)
	}
	var made sync.WaitGroup
	var failed atomic.Int64
	for i := range 16 {
		made.Add(1)
		go func() {
			defer made.Done()
			if _, err := create(fmt.Sprintf("many/%d", i), "", 10); err != nil {
				failed.Add(1)
			}
		}()
	}
	made.Wait()
	if failed.Load() != 0 || s.creates.resent != 5 {
		t.Fatalf("%d of 16 creates failed, %d resent in all; want none failed, none more resent", failed.Load(), s.creates.resent)
	}
}
