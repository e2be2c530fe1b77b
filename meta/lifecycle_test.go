package meta

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// With no bucket filter every bucket the catalog knows gets an audit cursor
// and is claimed, once per claim period, oldest pass first.
func TestClaimAuditCursorWithoutFilter(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	ctx := context.Background()
	bucket := "cursor-" + lease.NewID()[:8]
	if err := c.MarkBucket(ctx, bucket, true); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for {
		cur, ok, err := c.ClaimAuditCursor(ctx, nil, lease.Claim{For: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if seen[cur.Bucket] {
			t.Fatalf("bucket %s claimed twice within its claim", cur.Bucket)
		}
		seen[cur.Bucket] = true
	}
	if !seen[bucket] {
		t.Fatalf("the new bucket was never claimed (claimed %v)", seen)
	}
	cur, ok, err := c.ClaimAuditCursor(ctx, []string{bucket}, lease.Claim{For: time.Minute})
	if err != nil || ok {
		t.Fatalf("a claimed bucket was claimed again: %+v %v %v", cur, ok, err)
	}
}

// ReadStatus counts live leases per gateway, unknown guards with the oldest's
// age, uploads, and the outbox backlog above the slowest acknowledgement.
func TestReadStatus(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	ctx := context.Background()
	before, err := c.ReadStatus(ctx, time.Hour, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	bucket := "status-" + lease.NewID()[:8]
	gw := "gw-" + lease.NewID()[:8]
	holder := lease.NewID()
	acq, err := c.Acquire(ctx, lease.AcquireParams{Bucket: bucket, Key: "k", TTL: time.Minute,
		Attempt: lease.Attempt{ID: holder, Op: "put", Gateway: gw, DeclaredSize: 1}})
	if err != nil || acq == nil {
		t.Fatalf("acquire: %v %v", acq, err)
	}
	guard := lease.NewID()
	if _, err := c.Pool.Exec(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, updated_at)
		VALUES ($1, $2, 'g', 'put', 'unknown', 'x', clock_timestamp() - interval '1000 days')`, guard, bucket); err != nil {
		t.Fatal(err)
	}
	if err := c.RecordAttempt(ctx, lease.Attempt{ID: lease.NewID(), Bucket: bucket, Key: "u", Op: "multipart", State: lease.StateOpen, Gateway: gw, DeclaredSize: -1, UploadID: "st-" + lease.NewID()}); err != nil {
		t.Fatal(err)
	}
	// Creates whose upload id is not recorded: unknown, and open without an
	// id past the settle delay, count; a Create still in flight does not.
	for _, st := range []string{lease.StateUnknown, lease.StateOpen, "fresh"} {
		ago := "2 minutes"
		if st == "fresh" {
			st, ago = lease.StateOpen, "0 seconds"
		}
		if _, err := c.Pool.Exec(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, created_at, updated_at)
			VALUES ($1, $2, 'c', 'multipart', $3, 'x', clock_timestamp() - $4::interval, clock_timestamp() - $4::interval)`,
			lease.NewID(), bucket, st, ago); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.ReadStatus(ctx, time.Hour, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if s.Uploads.Unknown != before.Uploads.Unknown+2 || s.Backlog["uploads"] != before.Backlog["uploads"]+2 {
		t.Errorf("unrecorded Creates %d, uploads backlog %d (before %d, %d), want 2 more each",
			s.Uploads.Unknown, s.Backlog["uploads"], before.Uploads.Unknown, before.Backlog["uploads"])
	}
	if s.LeasesHeld[gw] != 1 {
		t.Errorf("leases held %v, want 1 for %s", s.LeasesHeld, gw)
	}
	if s.UnknownGuards.Count != before.UnknownGuards.Count+1 || s.UnknownGuards.OldestSeconds < 999*86400 {
		t.Errorf("unknown guards %+v (before %+v), want one more, the oldest 1000 days old", s.UnknownGuards, before.UnknownGuards)
	}
	if s.Uploads.Open != before.Uploads.Open+3 {
		t.Errorf("open uploads %d, before %d", s.Uploads.Open, before.Uploads.Open)
	}
	if s.Sessions != nil {
		t.Errorf("sessions %v: reserved, null until the sessions branch fills it", s.Sessions)
	}
}
