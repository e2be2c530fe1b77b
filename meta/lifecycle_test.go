package meta

import (
	"context"
	"testing"
	"time"
)

// With no bucket filter every bucket the catalog knows gets an audit cursor
// and is claimed, once per claim period, oldest pass first.
func TestClaimAuditCursorWithoutFilter(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	ctx := context.Background()
	bucket := "cursor-" + NewID()[:8]
	if err := c.MarkBucket(ctx, bucket, true); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for {
		cur, ok, err := c.ClaimAuditCursor(ctx, nil, time.Minute)
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
	cur, ok, err := c.ClaimAuditCursor(ctx, []string{bucket}, time.Minute)
	if err != nil || ok {
		t.Fatalf("a claimed bucket was claimed again: %+v %v %v", cur, ok, err)
	}
}
