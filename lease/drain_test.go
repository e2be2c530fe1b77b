package lease_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// 10,000 abandoned attempts (half unknown, half leased by holders that died;
// every one's bytes landed) and 2,000 abandoned multipart uploads drain in
// bounded batches of 100, each work kind within its 5 s budget per pass (plus
// at most the batch in flight). It prints each pass's size and duration and
// the longest time one work kind held a pass. FENCEGATE_DRAIN_SCALE divides
// the sizes (the default, 1, is the full run; -short runs a twentieth).
func TestDrainAbandonedWork(t *testing.T) {
	scale := 1
	if testing.Short() {
		scale = 20
	}
	if s, err := strconv.Atoi(os.Getenv("FENCEGATE_DRAIN_SCALE")); err == nil && s > 0 {
		scale = s
	}
	nAttempts, nUploads := 10000/scale, 2000/scale
	c := catalog(t)
	m := lease.NewManager(recLease, c, nil)
	drain(t, m)
	ctx := context.Background()
	st := newLifeStore()
	bucket := "drain-" + lease.NewID()[:8]
	start := time.Now()
	rows, err := c.Pool.Query(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, declared_size, created_at, updated_at)
		SELECT gen_random_uuid(), $1, 'k' || lpad(i::text, 6, '0'), 'put', CASE WHEN i % 2 = 0 THEN 'unknown' ELSE 'leased' END,
			'dead-gateway', 10, clock_timestamp() - interval '1 hour', clock_timestamp() - interval '1 hour'
		FROM generate_series(1, $2) i RETURNING attempt_id::text, key`, bucket, nAttempts)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, key string
		if err := rows.Scan(&id, &key); err != nil {
			t.Fatal(err)
		}
		st.land(bucket, key, id, 10)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	rows, err = c.Pool.Query(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, declared_size, upload_id, created_at, updated_at)
		SELECT gen_random_uuid(), $1, 'u' || lpad(i::text, 6, '0'), 'multipart', 'open', 'dead-gateway', NULL,
			'upload-' || $1 || '-' || i, clock_timestamp() - interval '2 days', clock_timestamp() - interval '2 days'
		FROM generate_series(1, $2) i RETURNING upload_id, key`, bucket, nUploads)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, key string
		if err := rows.Scan(&id, &key); err != nil {
			t.Fatal(err)
		}
		st.uploads[id] = storeUpload{bucket: bucket, key: key}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	t.Logf("planted %d abandoned attempts and %d abandoned uploads in %v", nAttempts, nUploads, time.Since(start).Round(time.Millisecond))

	s := service(t, c, m, st, lease.LifecycleConfig{Kinds: []string{lease.KindUnresolved, lease.KindUploads}, ClaimFor: time.Hour})
	maxBatch := 0
	s.Signals.Batch = func(b lease.BatchResult) { maxBatch = max(maxBatch, b.Counts.Claimed) }
	var longest lease.KindResult
	total := time.Now()
	for pass := 1; ; pass++ {
		p := s.RunOnce(ctx)
		line := fmt.Sprintf("pass %2d: %v", pass, p.Duration.Round(time.Millisecond))
		done := true
		for _, k := range p.Kinds {
			line += fmt.Sprintf(" | %s: %d batches, %d claimed, %d completed in %v", k.Kind, k.Batches, k.Counts.Claimed, k.Counts.Completed, k.Duration.Round(time.Millisecond))
			if k.Duration > longest.Duration {
				longest = k
			}
			if k.Counts.Claimed > 0 {
				done = false
			}
		}
		t.Log(line)
		if done {
			break
		}
		if pass > 100 {
			t.Fatal("not drained after 100 passes")
		}
	}
	t.Logf("drained in %v; largest batch %d; longest a work kind held a pass: %s, %v", time.Since(total).Round(time.Millisecond),
		maxBatch, longest.Kind, longest.Duration.Round(time.Millisecond))
	var left, open int
	if err := c.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state IN ('leased', 'unknown')), count(*) FILTER (WHERE state = 'open')
		FROM attempts WHERE bucket = $1`, bucket).Scan(&left, &open); err != nil {
		t.Fatal(err)
	}
	if left != 0 || open != 0 || len(st.uploads) != 0 {
		t.Fatalf("%d attempts unresolved, %d uploads open, %d at the store after draining", left, open, len(st.uploads))
	}
	if maxBatch > 100 {
		t.Fatalf("a batch claimed %d items, want at most 100", maxBatch)
	}
	// A kind may overrun its budget by the batch in flight, never by more.
	if longest.Duration > 5*time.Second+3*time.Second {
		t.Fatalf("%s held a pass for %v, budget 5 s", longest.Kind, longest.Duration)
	}
}
