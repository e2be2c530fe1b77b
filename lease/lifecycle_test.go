package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
	"github.com/fencegate/fencegate/store"
)

// lifeStore is a store for the lifecycle service: objects, multipart uploads
// in progress, and an outage switch.
type lifeStore struct {
	*landedStore
	mu      sync.Mutex
	uploads map[string]storeUpload // by upload id
	aborts  map[string]int
	down    atomic.Bool
	slow    time.Duration // every LastPart takes this long
}

type storeUpload struct {
	bucket, key string
	lastPart    time.Time
	initiated   time.Time // zero: an hour ago
}

func (u storeUpload) initiatedAt() time.Time {
	if u.initiated.IsZero() {
		return time.Now().Add(-time.Hour)
	}
	return u.initiated
}

func newLifeStore() *lifeStore {
	return &lifeStore{landedStore: newLandedStore(), uploads: map[string]storeUpload{}, aborts: map[string]int{}}
}

var errOutage = errors.New("test: the store is down")

func (s *lifeStore) Head(ctx context.Context, bucket, key string) (store.Object, error) {
	if s.down.Load() {
		return store.Object{}, errOutage
	}
	return s.landedStore.Head(ctx, bucket, key)
}

func (s *lifeStore) ListPage(ctx context.Context, bucket, prefix, after string, max int) (store.Page, error) {
	if s.down.Load() {
		return store.Page{}, errOutage
	}
	s.landedStore.mu.Lock()
	defer s.landedStore.mu.Unlock()
	var keys []string
	for k, o := range s.landed {
		if k[0] == bucket && o.Exists && k[1] > after {
			keys = append(keys, k[1])
		}
	}
	sort.Strings(keys)
	var p store.Page
	for i, k := range keys {
		if i == max {
			p.Next = keys[i-1]
			break
		}
		o := s.landed[[2]string{bucket, k}]
		p.Objects = append(p.Objects, store.Listed{Key: k, ETag: o.ETag, Size: o.Size})
	}
	return p, nil
}

func (s *lifeStore) ListMultipartUploads(ctx context.Context, bucket, keyMarker, uploadMarker string, max int) (store.UploadsPage, error) {
	if s.down.Load() {
		return store.UploadsPage{}, errOutage
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var p store.UploadsPage
	for id, u := range s.uploads {
		if u.bucket == bucket {
			p.Uploads = append(p.Uploads, store.Upload{Key: u.key, UploadID: id, Initiated: u.initiatedAt()})
		}
	}
	sort.Slice(p.Uploads, func(i, j int) bool {
		a, b := p.Uploads[i], p.Uploads[j]
		return a.Key < b.Key || a.Key == b.Key && a.UploadID < b.UploadID
	})
	return p, nil
}

func (s *lifeStore) KeyUploads(ctx context.Context, bucket, key string) ([]store.Upload, error) {
	if s.down.Load() {
		return nil, errOutage
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Upload
	for id, u := range s.uploads {
		if u.bucket == bucket && u.key == key {
			out = append(out, store.Upload{Key: u.key, UploadID: id, Initiated: u.initiatedAt()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UploadID < out[j].UploadID })
	return out, nil
}

func (s *lifeStore) LastPart(ctx context.Context, bucket, key, uploadID string) (time.Time, int, error) {
	if s.slow > 0 {
		time.Sleep(s.slow)
	}
	if s.down.Load() {
		return time.Time{}, 0, errOutage
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.uploads[uploadID]
	if !ok {
		return time.Time{}, 0, store.ErrNoSuchUpload
	}
	parts := 0
	if !u.lastPart.IsZero() {
		parts = 1
	}
	return u.lastPart, parts, nil
}

func (s *lifeStore) AbortMultipartUpload(ctx context.Context, bucket, key, uploadID string) error {
	if s.down.Load() {
		return errOutage
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborts[uploadID]++
	if _, ok := s.uploads[uploadID]; !ok {
		return store.ErrNoSuchUpload
	}
	delete(s.uploads, uploadID)
	return nil
}

func (s *lifeStore) abortsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborts[id]
}

// openUpload records an upload fencegate created, idle since `idle` ago, and
// puts it in the store with its last part at lastPart (zero: no parts).
func openUpload(t *testing.T, c *meta.Catalog, st *lifeStore, bucket, key string, idle time.Duration, lastPart time.Time) (attempt, uploadID string) {
	t.Helper()
	ctx := context.Background()
	attempt, uploadID = lease.NewID(), "up-"+lease.NewID()
	if err := c.RecordAttempt(ctx, lease.Attempt{ID: attempt, Bucket: bucket, Key: key, Op: "multipart", State: lease.StateOpen,
		Gateway: "test", DeclaredSize: -1}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetUploadID(ctx, attempt, uploadID); err != nil {
		t.Fatal(err)
	}
	backdate(t, c, attempt, idle)
	st.mu.Lock()
	st.uploads[uploadID] = storeUpload{bucket: bucket, key: key, lastPart: lastPart}
	st.mu.Unlock()
	return attempt, uploadID
}

func backdate(t *testing.T, c *meta.Catalog, attempt string, by time.Duration) {
	t.Helper()
	if _, err := c.Pool.Exec(context.Background(), `UPDATE attempts SET updated_at = clock_timestamp() - $2::interval,
		created_at = clock_timestamp() - $2::interval WHERE attempt_id = $1`, attempt, by.String()); err != nil {
		t.Fatal(err)
	}
}

type claimRow struct {
	State   string
	Claimed bool
	Tries   int
	Error   string
}

func claimOf(t *testing.T, c *meta.Catalog, attempt string) claimRow {
	t.Helper()
	var r claimRow
	if err := c.Pool.QueryRow(context.Background(), `SELECT state, claim_token IS NOT NULL, tries, coalesce(last_error, '')
		FROM attempts WHERE attempt_id = $1`, attempt).Scan(&r.State, &r.Claimed, &r.Tries, &r.Error); err != nil {
		t.Fatal(err)
	}
	return r
}

func service(t *testing.T, c *meta.Catalog, m *lease.Manager, st lease.LifecycleStore, cfg lease.LifecycleConfig) *lease.Service {
	t.Helper()
	s, err := lease.NewService(cfg, m, c, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An upload idle past the abandoned age is aborted; one with a recent part is
// left open (its activity recorded); one whose Complete try is unknown is
// never claimed; one whose key a live Complete holds is skipped. A store
// outage keeps the claimed uploads claimed and open, and they are all
// aborted once it ends.
func TestAbandonedUploads(t *testing.T) {
	c := catalog(t)
	m := lease.NewManager(recLease, c, nil)
	st := newLifeStore()
	bucket := "up-" + lease.NewID()[:8]
	ctx := context.Background()
	idle, idleID := openUpload(t, c, st, bucket, "idle", 2*time.Hour, time.Now().Add(-90*time.Minute))
	active, activeID := openUpload(t, c, st, bucket, "active", 2*time.Hour, time.Now().Add(-time.Minute))
	unknownC, unknownCID := openUpload(t, c, st, bucket, "completing-unknown", 2*time.Hour, time.Time{})
	held, heldID := openUpload(t, c, st, bucket, "completing", 2*time.Hour, time.Time{})
	// A Complete try of unknownC whose outcome was lost.
	try, err := m.Acquire(ctx, lease.Request{Bucket: bucket, Key: "completing-unknown", Op: "complete", UploadAttempt: unknownC, DeclaredSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	try.Finish(lease.StateUnknown, "test: the Complete's answer was lost")
	// A Complete of `held` in progress: it holds the key's lease.
	live, err := m.Acquire(ctx, lease.Request{Bucket: bucket, Key: "completing", Op: "complete", UploadAttempt: held, DeclaredSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Finish(lease.StateFailed, "test")

	cfg := lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, UploadIdle: time.Hour, RetryAfter: 100 * time.Millisecond, ClaimFor: time.Minute}
	s := service(t, c, m, st, cfg)
	st.down.Store(true)
	pass := s.RunOnce(ctx)
	k := pass.Kind(lease.KindUploads)
	t.Logf("outage pass: %+v", k)
	if k.Counts.Claimed != 2 || k.Counts.Retried != 2 {
		t.Fatalf("outage pass %+v: want the 2 claimable uploads claimed and kept for a retry", k)
	}
	for _, id := range []string{idle, active} {
		if r := claimOf(t, c, id); r.State != lease.StateOpen || !r.Claimed || r.Error == "" {
			t.Fatalf("upload %s after the outage pass: %+v, want open, still claimed, its error noted", id, r)
		}
	}
	if r := claimOf(t, c, unknownC); r.Claimed || r.Tries != 0 {
		t.Fatalf("an upload whose Complete is unknown was claimed: %+v", r)
	}
	if r := claimOf(t, c, held); r.Claimed || r.Tries != 0 {
		t.Fatalf("an upload whose Complete is in progress was claimed: %+v", r)
	}
	st.down.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for claimOf(t, c, idle).State == lease.StateOpen {
		if time.Now().After(deadline) {
			t.Fatalf("the idle upload was never aborted after the outage: %+v", claimOf(t, c, idle))
		}
		time.Sleep(100 * time.Millisecond) // the back-off runs out on the database clock
		s.RunOnce(ctx)
	}
	if r := claimOf(t, c, idle); r.State != lease.StateAborted || st.abortsOf(idleID) != 1 {
		t.Fatalf("idle upload %+v, %d aborts: want aborted once", r, st.abortsOf(idleID))
	}
	if r := claimOf(t, c, active); r.State != lease.StateOpen || r.Claimed || st.abortsOf(activeID) != 0 {
		t.Fatalf("an upload with a recent part: %+v, %d aborts; want open, unclaimed, never aborted", r, st.abortsOf(activeID))
	}
	if st.abortsOf(heldID) != 0 || claimOf(t, c, held).State != lease.StateOpen {
		t.Fatalf("an upload whose Complete holds the key was aborted")
	}
	if st.abortsOf(unknownCID) != 0 || claimOf(t, c, unknownC).State != lease.StateOpen {
		t.Fatalf("an upload whose Complete is unknown was aborted")
	}
	// Metrics per kind and outcome, and the backlog gauges of the last pass.
	counter := func(outcome string) float64 {
		var mv dto.Metric
		if err := s.Metrics.Items.WithLabelValues(lease.KindUploads, outcome).Write(&mv); err != nil {
			t.Fatal(err)
		}
		return mv.GetCounter().GetValue()
	}
	if counter("completed") != 1 || counter("retried") != 2 || counter("claimed") < 3 {
		t.Fatalf("upload metrics: claimed %v, completed %v, retried %v; want at least 3, 1, 2",
			counter("claimed"), counter("completed"), counter("retried"))
	}
	var gauge dto.Metric
	if err := s.Metrics.OldestUnknown.Write(&gauge); err != nil || gauge.GetGauge().GetValue() <= 0 {
		t.Fatalf("oldest unknown guard gauge %v (%v), want the unknown Complete try's age", gauge.GetGauge().GetValue(), err)
	}
}

// Two services at once abort each abandoned upload exactly once: every
// upload is claimed once (one try) and aborted once.
func TestCompetingServicesAbortEachUploadOnce(t *testing.T) {
	c := catalog(t)
	st := newLifeStore()
	bucket := "up2-" + lease.NewID()[:8]
	const n = 40
	var ids, uploads []string
	for i := range n {
		a, u := openUpload(t, c, st, bucket, fmt.Sprintf("k%02d", i), 2*time.Hour, time.Time{})
		ids, uploads = append(ids, a), append(uploads, u)
	}
	cfg := lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, UploadIdle: time.Hour, Batch: 10, ClaimFor: time.Minute}
	st.slow = 5 * time.Millisecond
	var wg sync.WaitGroup
	for range 2 {
		s := service(t, c, lease.NewManager(recLease, c, nil), st, cfg)
		wg.Add(1)
		go func() { defer wg.Done(); s.RunOnce(context.Background()) }()
	}
	wg.Wait()
	for i, id := range ids {
		r := claimOf(t, c, id)
		if r.State != lease.StateAborted || r.Tries != 1 || st.abortsOf(uploads[i]) != 1 {
			t.Errorf("upload %d: %+v, %d aborts; want aborted after one try, once", i, r, st.abortsOf(uploads[i]))
		}
	}
}

// A pass runs a kind's batches until a short batch; each batch is signalled;
// a kind whose budget runs out stops, and the next kind still runs.
func TestServiceBatchesAndBudgets(t *testing.T) {
	c := catalog(t)
	m := lease.NewManager(recLease, c, nil)
	drain(t, m)
	st := newLifeStore()
	unknownAttempts(t, m, st.landedStore, 250)
	var batches []int
	cfg := lease.LifecycleConfig{Kinds: []string{lease.KindUnresolved, lease.KindUploads}, ClaimFor: time.Minute,
		UploadIdle: time.Hour, Batch: 100, Budget: 30 * time.Second}
	s := service(t, c, m, st, cfg)
	s.Signals.Batch = func(b lease.BatchResult) {
		if b.Kind == lease.KindUnresolved {
			batches = append(batches, b.Counts.Claimed)
		}
	}
	// The uploads kind gets a slow store: its budget must cut it short.
	bucket := "slow-" + lease.NewID()[:8]
	for i := range 30 {
		openUpload(t, c, st, bucket, fmt.Sprintf("k%02d", i), 2*time.Hour, time.Now())
	}
	st.slow = 50 * time.Millisecond
	s2 := service(t, c, m, st, lease.LifecycleConfig{Kinds: []string{lease.KindUploads, lease.KindUnresolved}, ClaimFor: time.Minute,
		UploadIdle: time.Hour, Batch: 100, Budget: 300 * time.Millisecond})
	pass := s.RunOnce(context.Background())
	if fmt.Sprint(batches) != "[100 100 50]" || pass.Kind(lease.KindUnresolved).Counts.Completed != 250 {
		t.Fatalf("unresolved batches %v, pass %+v: want [100 100 50], all 250 settled", batches, pass.Kind(lease.KindUnresolved))
	}
	pass = s2.RunOnce(context.Background())
	up := pass.Kind(lease.KindUploads)
	t.Logf("slow uploads kind: %+v", up)
	if up.Duration > time.Second || up.Counts.Completed+up.Counts.Skipped != up.Counts.Claimed {
		t.Fatalf("the uploads kind ran %v (%+v), want it cut at its 300 ms budget with every claimed item accounted for", up.Duration, up)
	}
	if len(pass.Kinds) != 2 {
		t.Fatalf("the kind after the slow one did not run: %+v", pass)
	}
	if err := (lease.LifecycleConfig{Batch: 101}).Validate(); err == nil {
		t.Fatal("a batch of 101 was accepted")
	}
	if err := (lease.LifecycleConfig{ForeignUploads: "delete"}).Validate(); err == nil {
		t.Fatal("an unknown foreign upload policy was accepted")
	}
}

// A gateway stopped mid-pass and another that carries on process each
// upload exactly once: the one whose abort was cut is tried again after its
// back-off (two tries), those the stopped pass had claimed but not reached go
// back with their try taken back (one try each, by the second gateway), and
// every upload is aborted at the store once.
func TestRestartMidPassAbortsEachUploadOnce(t *testing.T) {
	c := catalog(t)
	st := newLifeStore()
	bucket := "restart-" + lease.NewID()[:8]
	const n = 10
	var ids, uploads []string
	for i := range n {
		a, u := openUpload(t, c, st, bucket, fmt.Sprintf("k%02d", i), 2*time.Hour, time.Time{})
		ids, uploads = append(ids, a), append(uploads, u)
	}
	cfg := lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, UploadIdle: time.Hour, RetryAfter: 200 * time.Millisecond, ClaimFor: time.Minute}
	gated := &gatedAborts{lifeStore: st, arrived: make(chan struct{}, n)}
	first := service(t, c, lease.NewManager(recLease, c, nil), gated, cfg)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { first.RunOnce(ctx); close(done) }()
	<-gated.arrived // the first abort is in flight: the gateway stops now
	stop()
	<-done
	second := service(t, c, lease.NewManager(recLease, c, nil), st, cfg)
	deadline := time.Now().Add(10 * time.Second)
	for {
		second.RunOnce(context.Background())
		aborted := 0
		for _, id := range ids {
			if claimOf(t, c, id).State == lease.StateAborted {
				aborted++
			}
		}
		if aborted == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d uploads aborted after the restart", aborted, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	tries := map[int]int{}
	for i, id := range ids {
		tries[claimOf(t, c, id).Tries]++
		if a := st.abortsOf(uploads[i]); a != 1 {
			t.Errorf("upload %d aborted %d times at the store, want once", i, a)
		}
	}
	t.Logf("uploads by tries: %v", tries)
	if tries[2] != 1 || tries[1] != n-1 {
		t.Fatalf("uploads by tries %v: want the cut one tried twice, every other once", tries)
	}
}

// gatedAborts holds every abort until its context ends (a gateway stopped
// while the store call was outstanding), counting none.
type gatedAborts struct {
	*lifeStore
	arrived chan struct{}
}

func (g *gatedAborts) AbortMultipartUpload(ctx context.Context, bucket, key, uploadID string) error {
	g.arrived <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}
