package meta

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// claimKind is one kind of the reconciler's work items, set up in the
// catalog, claimed, and backed off the way its worker does.
type claimKind struct {
	name string
	// item makes one claimable item and returns how to find it among claimed.
	item func(t *testing.T, ctx context.Context, c *Catalog) string
	// claim claims items and returns the ids of those claimed.
	claim func(ctx context.Context, c *Catalog, claim lease.Claim) ([]string, error)
	// backOff holds the item off for d after a failed try, as its worker does.
	backOff func(ctx context.Context, c *Catalog, id string, d time.Duration) error
}

// openTestSession opens a gateway session, alive for an hour unless ended
// or expired by the test, and ends it when the test does.
func openTestSession(t *testing.T, c *Catalog) string {
	t.Helper()
	ctx := context.Background()
	id, err := c.OpenSession(ctx, "gw-"+lease.NewID()[:8], time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.EndSession(ctx, id) })
	return id
}

// idsOf takes a claim's result and returns a function that names each
// claimed item by id.
func idsOf[T any](items []T, err error) func(id func(T) string) ([]string, error) {
	return func(id func(T) string) ([]string, error) {
		ids := make([]string, 0, len(items))
		for _, it := range items {
			ids = append(ids, id(it))
		}
		return ids, err
	}
}

func claimKinds() []claimKind {
	oldAttempt := func(t *testing.T, ctx context.Context, c *Catalog, op, state, uploadID string) string {
		id := lease.NewID()
		if _, err := c.Pool.Exec(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, upload_id, created_at, updated_at)
			VALUES ($1, 'claims', $2, $3, $4, 'g', nullif($5, ''), clock_timestamp() - interval '1 day', clock_timestamp() - interval '1 day')`,
			id, id, op, state, uploadID); err != nil {
			t.Fatal(err)
		}
		return id
	}
	return []claimKind{
		{
			name: "unresolved key",
			item: func(t *testing.T, ctx context.Context, c *Catalog) string {
				return oldAttempt(t, ctx, c, "put", lease.StateUnknown, "")
			},
			claim: func(ctx context.Context, c *Catalog, claim lease.Claim) ([]string, error) {
				return idsOf(c.ClaimUnresolved(ctx, 10000, claim, time.Second))(func(k [2]string) string { return k[1] })
			},
			backOff: func(ctx context.Context, c *Catalog, id string, d time.Duration) error {
				return c.RetryKeyLater(ctx, "claims", id, d, d, "store down")
			},
		},
		{
			name: "abandoned upload",
			item: func(t *testing.T, ctx context.Context, c *Catalog) string {
				return oldAttempt(t, ctx, c, "multipart", lease.StateOpen, "up-"+lease.NewID())
			},
			claim: func(ctx context.Context, c *Catalog, claim lease.Claim) ([]string, error) {
				return idsOf(c.ClaimAbandonedUploads(ctx, 10000, time.Second, claim))(func(u lease.AbandonedUpload) string { return u.AttemptID })
			},
			backOff: func(ctx context.Context, c *Catalog, id string, d time.Duration) error {
				return c.RetryLater(ctx, id, d, "store down")
			},
		},
		{
			name: "upload without an id",
			item: func(t *testing.T, ctx context.Context, c *Catalog) string {
				return oldAttempt(t, ctx, c, "multipart", lease.StateUnknown, "")
			},
			claim: func(ctx context.Context, c *Catalog, claim lease.Claim) ([]string, error) {
				return idsOf(c.ClaimUnboundUploads(ctx, 10000, time.Second, claim))(func(u lease.UploadWithoutID) string { return u.AttemptID })
			},
			backOff: func(ctx context.Context, c *Catalog, id string, d time.Duration) error {
				return c.RetryLater(ctx, id, d, "store down")
			},
		},
		{
			name: "audit cursor",
			item: func(t *testing.T, ctx context.Context, c *Catalog) string {
				bucket := "claims-" + lease.NewID()[:8]
				if err := c.MarkBucket(ctx, bucket, true); err != nil {
					t.Fatal(err)
				}
				return bucket
			},
			claim: func(ctx context.Context, c *Catalog, claim lease.Claim) ([]string, error) {
				var ids []string
				for {
					cur, ok, err := c.ClaimAuditCursor(ctx, nil, claim)
					if err != nil || !ok {
						return ids, err
					}
					ids = append(ids, cur.Bucket)
				}
			},
			backOff: func(ctx context.Context, c *Catalog, id string, d time.Duration) error {
				return c.AuditCursorFailed(ctx, id, d, "store down")
			},
		},
		{
			name: "ended reservation",
			item: func(t *testing.T, ctx context.Context, c *Catalog) string {
				s := &Reservations{Pool: c.Pool}
				key := "r-" + lease.NewID()
				r, err := s.Create(ctx, ReservationRequest{Bucket: "claims", Key: key, AccessKeyID: "K", TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				a := newUUID()
				if ok, err := s.Bind(ctx, r.ID, a, "claims", key); !ok || err != nil {
					t.Fatalf("bind: %v %v", ok, err)
				}
				if _, err := c.Pool.Exec(ctx, `INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway)
					VALUES ($1, 'claims', $2, 'put', 'unknown', 'g')`, a, key); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Pool.Exec(ctx, `SELECT fencegate_reservation_end($1, 'cancelled', false)`, r.ID); err != nil {
					t.Fatal(err)
				}
				return r.ID
			},
			claim: func(ctx context.Context, c *Catalog, claim lease.Claim) ([]string, error) {
				return idsOf(c.ClaimEndedReservations(ctx, 10000, claim))(func(e lease.EndedReservation) string { return e.ID })
			},
			backOff: func(ctx context.Context, c *Catalog, id string, d time.Duration) error {
				return c.ReservationRetry(ctx, id, d, "store down")
			},
		},
	}
}

// TestClaimsEndWithTheClaimingSession: a work item claimed by a gateway
// whose session then ends (it crashed, or was partitioned past its session
// timeout; or it stopped) is claimable by another gateway at once, not only
// when the claim period runs out; a live session's claim keeps others off. A back-off after
// a failed try is a wait, not a claim: it holds whoever made it.
func TestClaimsEndWithTheClaimingSession(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	ctx := context.Background()
	session := func() string { return openTestSession(t, c) }
	for _, k := range claimKinds() {
		t.Run(k.name, func(t *testing.T) {
			id := k.item(t, ctx, c)
			claimed := func(claim lease.Claim) bool {
				t.Helper()
				ids, err := k.claim(ctx, c, claim)
				if err != nil {
					t.Fatal(err)
				}
				return slices.Contains(ids, id)
			}
			dead, live, other := session(), session(), session()
			if !claimed(lease.Claim{For: time.Hour, Session: dead}) {
				t.Fatal("the item was not claimed")
			}
			if claimed(lease.Claim{For: time.Hour, Session: live}) {
				t.Fatal("claimed again while its claiming session is alive")
			}
			// The claiming gateway crashed: its session row expires unextended.
			if _, err := c.Pool.Exec(ctx, `UPDATE sessions SET expires_at = clock_timestamp() WHERE session_id = $1`, dead); err != nil {
				t.Fatal(err)
			}
			if !claimed(lease.Claim{For: time.Hour, Session: live}) {
				t.Fatal("not claimable after its claiming session ended (the claim held for its whole period)")
			}
			if claimed(lease.Claim{For: time.Hour, Session: other}) {
				t.Fatal("claimed again while the new claim's session is alive")
			}
			if err := k.backOff(ctx, c, id, time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := c.EndSession(ctx, live); err != nil { // a clean stop
				t.Fatal(err)
			}
			if claimed(lease.Claim{For: time.Hour, Session: other}) {
				t.Fatal("a back-off ended with the session that made it")
			}
		})
	}
}

// A claim without a session (a tool, a gateway whose session is down) lasts
// its period.
func TestAClaimWithoutASessionLastsItsPeriod(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	ctx := context.Background()
	k := claimKinds()[0]
	id := k.item(t, ctx, c)
	ids, err := k.claim(ctx, c, lease.Claim{For: time.Hour})
	if err != nil || !slices.Contains(ids, id) {
		t.Fatalf("not claimed: %v %v", ids, err)
	}
	if ids, err := k.claim(ctx, c, lease.Claim{For: time.Hour}); err != nil || slices.Contains(ids, id) {
		t.Fatalf("claimed twice within a claim without a session: %v %v", ids, err)
	}
}
