package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
	"github.com/fencegate/fencegate/store"
)

// unboundAttempt records a multipart attempt whose Create left no upload id:
// unknown (its answer lost; the outcome recorded window after the Create) or
// open (its id could not be recorded), created ago.
func unboundAttempt(t *testing.T, c *meta.Catalog, bucket, key, state string, ago, window time.Duration) (string, time.Time) {
	t.Helper()
	ctx := context.Background()
	id := lease.NewID()
	if err := c.RecordAttempt(ctx, lease.Attempt{ID: id, Bucket: bucket, Key: key, Op: "multipart", State: lease.StateOpen,
		Gateway: "test", DeclaredSize: -1}); err != nil {
		t.Fatal(err)
	}
	if state == lease.StateUnknown {
		if err := c.SetState(ctx, id, lease.StateOpen, lease.StateUnknown, "test: no answer from the store"); err != nil {
			t.Fatal(err)
		}
	} else {
		window = 0
	}
	var created time.Time
	if err := c.Pool.QueryRow(ctx, `UPDATE attempts SET created_at = clock_timestamp() - $2::interval,
		updated_at = clock_timestamp() - $2::interval + $3::interval WHERE attempt_id = $1 RETURNING created_at`,
		id, ago.String(), window.String()).Scan(&created); err != nil {
		t.Fatal(err)
	}
	return id, created
}

func (s *lifeStore) put(bucket, key, id string, initiated time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uploads[id] = storeUpload{bucket: bucket, key: key, initiated: initiated}
}

type boundRow struct {
	State, UploadID, Reason, Error string
	Tries                          int
	Claimed                        bool
}

func boundOf(t *testing.T, c *meta.Catalog, attempt string) boundRow {
	t.Helper()
	var r boundRow
	if err := c.Pool.QueryRow(context.Background(), `SELECT state, coalesce(upload_id, ''), coalesce(reason, ''), coalesce(last_error, ''),
		tries, claim_token IS NOT NULL FROM attempts WHERE attempt_id = $1`, attempt).Scan(&r.State, &r.UploadID, &r.Reason, &r.Error,
		&r.Tries, &r.Claimed); err != nil {
		t.Fatal(err)
	}
	return r
}

// Multipart attempts whose Create left no upload id are bound to the
// uploads the store has at their key, one each, oldest first, each to an
// upload initiated within its Create's window that no attempt names; an
// attempt younger than the settle delay is left alone; one with no such
// upload is looked for again, and marked failed once older than the give-up
// age. Nothing is aborted.
func TestUnboundUploadsAreBound(t *testing.T) {
	c := catalog(t)
	m := lease.NewManager(recLease, c, nil)
	st := newLifeStore()
	bucket := "unb-" + lease.NewID()[:8]
	ctx := context.Background()
	sec := time.Second
	a1, c1 := unboundAttempt(t, c, bucket, "k", lease.StateUnknown, 10*time.Minute, sec)
	a2, c2 := unboundAttempt(t, c, bucket, "k", lease.StateUnknown, 10*time.Minute-2*sec, sec)
	a3, c3 := unboundAttempt(t, c, bucket, "k", lease.StateOpen, 8*time.Minute, 0)
	// An upload of k fencegate recorded, initiated within a1's window: it is
	// not a1's (its id is another attempt's).
	_, recorded := openUpload(t, c, st, bucket, "k", time.Minute, time.Time{})
	st.put(bucket, "k", recorded, c1.Add(300*time.Millisecond))
	// The store's Initiated has whole seconds: u1 reads as before a1's row.
	st.put(bucket, "k", "u1", c1.Truncate(time.Second))
	st.put(bucket, "k", "u2", c2.Add(500*time.Millisecond))
	st.put(bucket, "k", "u3", c3.Add(2*time.Second))
	st.put(bucket, "k", "foreign", c1.Add(-20*time.Minute))
	gone, _ := unboundAttempt(t, c, bucket, "gone", lease.StateUnknown, 20*time.Minute, sec)
	young, cy := unboundAttempt(t, c, bucket, "young", lease.StateUnknown, 10*time.Second, sec)
	st.put(bucket, "young", "u-young", cy)
	late, _ := unboundAttempt(t, c, bucket, "late", lease.StateUnknown, 5*time.Minute, sec)
	st.put(bucket, "late", "u-late", time.Now().Add(-time.Minute)) // long after late's Create

	// The audit tells the uploads an unbound attempt may have made from
	// foreign ones.
	aud := lease.Auditor{DB: c, Store: st, DBTimeout: time.Second}
	foreign, unbound, _, err := aud.ForeignUploads(ctx, bucket, "", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(ups []store.Upload) string {
		var out []string
		for _, u := range ups {
			out = append(out, u.UploadID)
		}
		return strings.Join(out, ",")
	}
	if f, u := ids(foreign), ids(unbound); f != "foreign,u-late" || u != "u1,u2,u3,u-young" {
		t.Errorf("audit: foreign %s, unbound %s; want foreign,u-late and u1,u2,u3,u-young", f, u)
	}

	svc := service(t, c, m, st, lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, RetryAfter: time.Second})
	k := svc.RunOnce(ctx).Kind(lease.KindUploads)
	if k.Counts.Claimed != 5 || k.Counts.Completed != 4 || k.Counts.Skipped != 1 || k.Counts.Failed != 0 {
		t.Errorf("pass counts %+v: want 5 claimed (k's three, gone, late), 4 completed, 1 skipped", k.Counts)
	}
	for _, w := range []struct{ attempt, upload string }{{a1, "u1"}, {a2, "u2"}, {a3, "u3"}} {
		r := boundOf(t, c, w.attempt)
		if r.State != lease.StateOpen || r.UploadID != w.upload || r.Claimed || r.Tries != 0 {
			t.Errorf("attempt bound %+v, want open with %s, unclaimed, tries reset", r, w.upload)
		}
	}
	if r := boundOf(t, c, gone); r.State != lease.StateFailed || !strings.Contains(r.Reason, "no upload at the store") {
		t.Errorf("the attempt without an upload: %+v, want failed, no upload at the store", r)
	}
	if r := boundOf(t, c, young); r.State != lease.StateUnknown || r.Tries != 0 || r.UploadID != "" {
		t.Errorf("the attempt younger than the settle delay: %+v, want left alone", r)
	}
	if r := boundOf(t, c, late); r.State != lease.StateUnknown || r.Tries != 1 || !r.Claimed || r.UploadID != "" {
		t.Errorf("the attempt whose key holds only a later upload: %+v, want unknown, looked for once, claimed for its back-off", r)
	}
	var foreignNamed int
	if err := c.Pool.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE upload_id IN ('foreign', 'u-late')`).Scan(&foreignNamed); err != nil || foreignNamed != 0 {
		t.Errorf("%d attempts name an upload outside every window (%v)", foreignNamed, err)
	}
	for _, id := range []string{"u1", "u2", "u3", "foreign", "u-late", "u-young", recorded} {
		if st.abortsOf(id) != 0 {
			t.Errorf("upload %s was aborted", id)
		}
	}
	if foreign, unbound, _, err = aud.ForeignUploads(ctx, bucket, "", "", 1000); err != nil {
		t.Fatal(err)
	}
	if f, u := ids(foreign), ids(unbound); f != "foreign,u-late" || u != "u-young" {
		t.Errorf("audit after the pass: foreign %s, unbound %s; want foreign,u-late and u-young", f, u)
	}
}

// A store outage while unbound attempts are looked for: they stay claimed,
// unknown, their error noted, and are bound once the store answers again.
func TestUnboundUploadsSurviveStoreOutage(t *testing.T) {
	c := catalog(t)
	m := lease.NewManager(recLease, c, nil)
	st := newLifeStore()
	bucket := "unbo-" + lease.NewID()[:8]
	ctx := context.Background()
	a, created := unboundAttempt(t, c, bucket, "k", lease.StateUnknown, 30*time.Minute, time.Second)
	st.put(bucket, "k", "u", created.Add(200*time.Millisecond))
	svc := service(t, c, m, st, lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, RetryAfter: 100 * time.Millisecond})
	st.down.Store(true)
	k := svc.RunOnce(ctx).Kind(lease.KindUploads)
	if r := boundOf(t, c, a); r.State != lease.StateUnknown || !r.Claimed || r.Error == "" || k.Counts.Retried != 1 {
		t.Fatalf("during the outage: %+v (pass %+v), want unknown, claimed, its error noted, retried", r, k.Counts)
	}
	st.down.Store(false)
	time.Sleep(150 * time.Millisecond)
	svc.RunOnce(ctx)
	if r := boundOf(t, c, a); r.State != lease.StateOpen || r.UploadID != "u" {
		t.Fatalf("after the outage: %+v, want open with u", r)
	}
}
