package conformance

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/chaos"
	"github.com/fencegate/fencegate/lease"
)

// A chaos campaign whose audit never comes clean reports each finding's
// key's attempts with their state, tries, the claim still held (and whether
// its gateway's session lives) and the last error, and the bucket's audit
// cursor: what a campaign that failed in CI must say, since its evidence
// folder is gone with the machine.
func TestChaosAuditDiagnosis(t *testing.T) {
	ctx := context.Background()
	pool := packageKeys(t).Pool
	bucket, id := "diag-"+lease.NewID()[:8], lease.NewID()
	if _, err := pool.Exec(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, declared_size, tries, claimed_until, last_error, claim_session)
		VALUES ($1, $2, 'k/r501-24', 'put', 'unknown', 'g1', 3063, 2, clock_timestamp() + interval '100 s', 'the store is restarting', $3)`,
		id, bucket, lease.NewID()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO audit_cursors (bucket, tries, claimed_until, last_error, passed_at)
		VALUES ($1, 3, clock_timestamp() + interval '50 s', 'list failed', clock_timestamp() - interval '7 s')`, bucket); err != nil {
		t.Fatal(err)
	}
	out := chaos.AuditDiagnosis(ctx, pool, bucket, `[{"kind": "unknown_attempt", "bucket": "`+bucket+`", "key": "k/r501-24"}]`+"\nfencegate audit: exit status 3")
	for _, want := range []string{"k/r501-24's attempts:", id + " put unknown size 3063, tries 2, claimed 10", "s more (by an ended session)",
		`last error "the store is restarting"`, "audit cursor: tries 3, claimed 5", "s more (no claiming session)", "passed 7 s ago", `last error "list failed"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the diagnosis lacks %q:%s", want, out)
		}
	}
	if got := chaos.AuditDiagnosis(ctx, pool, bucket, "no JSON at all"); !strings.Contains(got, "audit cursor") || strings.Contains(got, "attempts:") {
		t.Errorf("a diagnosis without findings: %q, want the cursor alone", got)
	}
}
