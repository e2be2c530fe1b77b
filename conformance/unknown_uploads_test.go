package conformance

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/lease"
)

// unboundUpload is the audit's finding for an upload no attempt names yet but
// one whose Create left no upload id in the catalog may have created.
const unboundUpload = "unbound_upload"

// A multipart upload's attempt as the catalog has it.
type mpAttempt struct {
	ID, State, UploadID, Reason, Error string
	Tries                              int
	Created, Updated                   time.Time
}

// multipartAttempts lists key's multipart attempts, oldest first.
func multipartAttempts(t *testing.T, bucket, key string) []mpAttempt {
	t.Helper()
	rows, err := packageKeys(t).Pool.Query(context.Background(), `SELECT attempt_id::text, state, coalesce(upload_id, ''),
		coalesce(reason, ''), coalesce(last_error, ''), tries, created_at, updated_at
		FROM attempts WHERE bucket = $1 AND key = $2 AND op = 'multipart' ORDER BY created_at`, bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []mpAttempt
	for rows.Next() {
		var a mpAttempt
		if err := rows.Scan(&a.ID, &a.State, &a.UploadID, &a.Reason, &a.Error, &a.Tries, &a.Created, &a.Updated); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type storeUploadAt struct {
	ID        string
	Initiated time.Time
}

// uploadsAt lists the uploads in progress the store has at exactly key,
// oldest first.
func uploadsAt(t *testing.T, g *testGateway, bucket, key string) []storeUploadAt {
	t.Helper()
	out, err := g.Store.S3Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &bucket, Prefix: &key})
	if err != nil {
		t.Fatal(err)
	}
	var ups []storeUploadAt
	for _, u := range out.Uploads {
		if aws.ToString(u.Key) == key {
			ups = append(ups, storeUploadAt{ID: aws.ToString(u.UploadId), Initiated: aws.ToTime(u.Initiated)})
		}
	}
	sort.Slice(ups, func(i, j int) bool {
		if !ups[i].Initiated.Equal(ups[j].Initiated) {
			return ups[i].Initiated.Before(ups[j].Initiated)
		}
		return ups[i].ID < ups[j].ID
	})
	return ups
}

// auditJSON runs `fencegate audit --json` on bucket: its findings and exit
// status.
func auditJSON(t *testing.T, g *testGateway, bucket string) ([]lease.Finding, int) {
	t.Helper()
	out, code := runAudit(t, g, bucket, "--json")
	var fs []lease.Finding
	if err := json.Unmarshal([]byte(out), &fs); err != nil {
		t.Fatalf("fencegate audit --json: %v\n%s", err, out)
	}
	return fs, code
}

// findingsAt keeps the findings at key; kinds counts them by kind.
func findingsAt(fs []lease.Finding, key string) (at []lease.Finding, kinds map[string]int) {
	kinds = map[string]int{}
	for _, f := range fs {
		if f.Key == key {
			at = append(at, f)
			kinds[f.Kind]++
		}
	}
	return at, kinds
}

// runUploadsUntil runs passes of svc until cond holds.
func runUploadsUntil(t *testing.T, svc *lease.Service, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for pass := 0; ; pass++ {
		k := svc.RunOnce(context.Background()).Kind(lease.KindUploads)
		if cond() {
			t.Logf("%s after pass %d (%+v)", what, pass, k.Counts)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last pass %+v)", limit, what, k.Counts)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// storeKeyGone reports that the store lists no upload at key any more.
func storeKeyGone(t *testing.T, g *testGateway, bucket, key string) bool {
	return len(uploadsAt(t, g, bucket, key)) == 0
}

// The audit's incremental pass with the foreign upload policy at its
// harshest (abort at once): a foreign upload is aborted, an upload an
// unbound attempt may have created is not, and is not recorded as foreign.
func auditAbortsOnlyForeign(t *testing.T, g *testGateway, bucket, ours string, foreign ...string) {
	t.Helper()
	svc := lifecycleService(t, g, lease.LifecycleConfig{Kinds: []string{lease.KindAudit}, ForeignUploads: lease.ForeignAbort,
		ForeignUploadAge: time.Nanosecond})
	k := svc.RunOnce(context.Background()).Kind(lease.KindAudit)
	t.Logf("audit pass with --foreign-uploads=abort: %+v", k.Counts)
	for _, key := range foreign {
		if !storeKeyGone(t, g, bucket, key) {
			t.Errorf("the foreign upload at %s was not aborted", key)
		}
	}
	if len(uploadsAt(t, g, bucket, ours)) == 0 {
		t.Fatalf("the audit's foreign upload policy aborted the upload at %s, which an attempt of fencegate's may have created", ours)
	}
	var n int
	if err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT count(*) FROM foreign_uploads WHERE bucket = $1 AND key = $2`,
		bucket, ours).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d uploads at %s recorded as foreign", n, ours)
	}
}

// CreateMultipartUpload whose answer is lost after the store created the
// upload: the attempt is unknown and the catalog has no upload id. The
// audit does not call the upload foreign (it may be fencegate's: it reports
// it unbound, and the foreign-upload policy leaves it alone); the uploads
// work kind binds it to its attempt once the settle delay passed, one upload
// per attempt (two Creates of one key lost their answers here); then the
// audit is clean, and the abandoned-upload clean-up aborts both at the store.
func TestUnknownUploadCreateIsBound(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-unkbind-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	ctx := context.Background()
	// Created straight at the store: foreign, whatever happens to k.
	if _, err := g.Store.S3Client().CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("other")}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		dropped := fp.DropResponse(faultproxy.MethodPath("POST", "/"+bucket+"/k"), 1)
		if r := doRaw(g.Endpoint, "POST", "/"+bucket+"/k?uploads", nil, nil); r.Status == 200 {
			t.Fatalf("CreateMultipartUpload with its answer dropped: %+v", r)
		}
		if ev := <-dropped; ev.Status != 200 {
			t.Fatalf("the store answered %d", ev.Status)
		}
	}
	as := multipartAttempts(t, bucket, "k")
	if len(as) != 2 || as[0].State != lease.StateUnknown || as[1].State != lease.StateUnknown || as[0].UploadID != "" || as[1].UploadID != "" {
		t.Fatalf("attempts %+v: want two unknown, without an upload id", as)
	}
	atStore := uploadsAt(t, g, bucket, "k")
	if len(atStore) != 2 {
		t.Fatalf("the store has %d uploads at k, want the 2 the lost Creates made", len(atStore))
	}

	fs, code := auditJSON(t, g, bucket)
	at, kinds := findingsAt(fs, "k")
	t.Logf("fencegate audit before the binding (exit %d): %+v", code, fs)
	if kinds[lease.ForeignUpload] != 0 || kinds[unboundUpload] != 2 || len(at) != 2 {
		t.Fatalf("audit at k: %+v, want the 2 uploads reported unbound, not foreign", at)
	}
	if _, other := findingsAt(fs, "other"); other[lease.ForeignUpload] != 1 || code != 3 {
		t.Fatalf("audit: %+v, exit %d: want the upload at other reported foreign, exit 3", fs, code)
	}
	auditAbortsOnlyForeign(t, g, bucket, "k", "other")

	svc := lifecycleService(t, g, lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, UploadCreateSettle: 300 * time.Millisecond,
		UploadCreateGiveUp: time.Minute, UploadIdle: time.Hour, RetryAfter: 100 * time.Millisecond})
	runUploadsUntil(t, svc, "both attempts bound", 20*time.Second, func() bool {
		as = multipartAttempts(t, bucket, "k")
		return as[0].UploadID != "" && as[1].UploadID != ""
	})
	bound := map[string]bool{}
	for _, a := range as {
		if a.State != lease.StateOpen {
			t.Errorf("attempt %s bound to %s is %s, want open", a.ID, a.UploadID, a.State)
		}
		bound[a.UploadID] = true
	}
	for _, u := range atStore {
		if !bound[u.ID] {
			t.Errorf("the store's upload %s at k was not bound (attempts %+v)", u.ID, as)
		}
	}
	if !atStore[0].Initiated.Equal(atStore[1].Initiated) && as[0].UploadID != atStore[0].ID {
		t.Errorf("the older attempt got upload %s, want the earlier one %s (%+v)", as[0].UploadID, atStore[0].ID, atStore)
	}

	if fs, code := auditJSON(t, g, bucket); len(fs) != 0 || code != 0 {
		t.Fatalf("audit after the binding: %+v, exit %d; want nothing, exit 0", fs, code)
	}

	clean := lifecycleService(t, g, lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, UploadCreateSettle: 300 * time.Millisecond,
		UploadIdle: time.Second, RetryAfter: 100 * time.Millisecond})
	runUploadsUntil(t, clean, "both uploads aborted", 20*time.Second, func() bool {
		as = multipartAttempts(t, bucket, "k")
		return as[0].State == lease.StateAborted && as[1].State == lease.StateAborted
	})
	if !storeKeyGone(t, g, bucket, "k") {
		t.Fatalf("the store still has uploads at k: %+v", uploadsAt(t, g, bucket, "k"))
	}
}

// CreateMultipartUpload whose answer reaches the gateway, which cannot
// record the upload's id because PostgreSQL is cut right then: the client
// has its upload id, the catalog an open attempt without one. The audit
// reports the upload unbound (and the foreign policy, set to abort, leaves
// it alone: its client may be uploading parts); the uploads work kind binds
// it to its attempt; the audit is then clean, and the abandoned-upload
// clean-up aborts it.
func TestUnrecordedUploadIDIsBound(t *testing.T) {
	fp, fep := faultStore(t)
	pgp, pgURL := faultDatabase(t)
	lc := testLease
	lc.DBTimeout = time.Second
	g := startGateway(t, gatewayOptions{Store: &fep, DatabaseURL: pgURL, Lease: lc})
	bucket := "t-unrecbind-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	ctx := context.Background()

	held := fp.HoldResponse(faultproxy.MethodPath("POST", "/"+bucket+"/k"), 1)
	type created struct {
		id  string
		err error
	}
	res := make(chan created, 1)
	go func() {
		c := g.S3Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
		up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("k")})
		if err != nil {
			res <- created{err: err}
			return
		}
		res <- created{id: aws.ToString(up.UploadId)}
	}()
	if ev := <-held.Arrived; ev.Status != 200 {
		t.Fatalf("the store answered the Create %d", ev.Status)
	}
	pgp.Blackhole(true) // PostgreSQL is cut as the store's answer reaches the gateway
	held.Release()
	var cr created
	select {
	case cr = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("the Create was never answered")
	}
	// The connections that lived through the blackhole are broken (and the
	// cancel request for the timed-out statement waits on one): reset them all.
	pgp.CutAll()
	pgp.Blackhole(false)
	if cr.err != nil || cr.id == "" {
		t.Fatalf("the Create: %q, %v; want the store's answer relayed", cr.id, cr.err)
	}
	as := multipartAttempts(t, bucket, "k")
	if len(as) != 1 || as[0].State != lease.StateOpen || as[0].UploadID != "" {
		t.Fatalf("attempts %+v: want one open, its upload id not recorded", as)
	}

	fs, code := auditJSON(t, g, bucket)
	at, kinds := findingsAt(fs, "k")
	t.Logf("fencegate audit before the binding (exit %d): %+v", code, fs)
	if len(at) != 1 || kinds[unboundUpload] != 1 || at[0].UploadID != cr.id {
		t.Fatalf("audit at k: %+v, want upload %s reported unbound, not foreign", at, cr.id)
	}
	auditAbortsOnlyForeign(t, g, bucket, "k")

	svc := lifecycleService(t, g, lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, UploadCreateSettle: 300 * time.Millisecond,
		UploadCreateGiveUp: time.Minute, UploadIdle: time.Hour, RetryAfter: 100 * time.Millisecond})
	runUploadsUntil(t, svc, "the attempt bound", 20*time.Second, func() bool {
		as = multipartAttempts(t, bucket, "k")
		return as[0].UploadID != ""
	})
	if as[0].UploadID != cr.id || as[0].State != lease.StateOpen {
		t.Fatalf("attempt %+v, want open with the client's upload id %s", as[0], cr.id)
	}
	if fs, code := auditJSON(t, g, bucket); len(fs) != 0 || code != 0 {
		t.Fatalf("audit after the binding: %+v, exit %d; want nothing, exit 0", fs, code)
	}

	clean := lifecycleService(t, g, lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, UploadIdle: time.Second,
		RetryAfter: 100 * time.Millisecond})
	runUploadsUntil(t, clean, "the upload aborted", 20*time.Second, func() bool {
		return multipartAttempts(t, bucket, "k")[0].State == lease.StateAborted
	})
	if !storeKeyGone(t, g, bucket, "k") {
		t.Fatalf("the store still has uploads at k: %+v", uploadsAt(t, g, bucket, "k"))
	}
}

// CreateMultipartUpload answered 5xx without reaching the store: the
// attempt is unknown, and no upload exists. The uploads work kind looks for
// it, leaves it unknown while it is younger than the give-up age, and then
// marks it failed ("no upload at the store").
func TestUnknownUploadCreateWithoutUploadFails(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-unkfail-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	fp.Fail(faultproxy.MethodPath("POST", "/"+bucket+"/k"), 1, 503, "<Error><Code>ServiceUnavailable</Code></Error>")
	if r := doRaw(g.Endpoint, "POST", "/"+bucket+"/k?uploads", nil, nil); r.Status != 503 {
		t.Fatalf("CreateMultipartUpload answered 503 before the store: %+v", r)
	}
	as := multipartAttempts(t, bucket, "k")
	if len(as) != 1 || as[0].State != lease.StateUnknown {
		t.Fatalf("attempts %+v: want one unknown", as)
	}
	const settle, giveUp = 300 * time.Millisecond, 3 * time.Second
	svc := lifecycleService(t, g, lease.LifecycleConfig{Kinds: []string{lease.KindUploads}, UploadCreateSettle: settle,
		UploadCreateGiveUp: giveUp, UploadIdle: time.Hour, RetryAfter: 100 * time.Millisecond})
	time.Sleep(settle + 100*time.Millisecond)
	svc.RunOnce(context.Background())
	if a := multipartAttempts(t, bucket, "k")[0]; a.State != lease.StateUnknown || a.Tries != 1 {
		t.Fatalf("after one pass, younger than the give-up age: %+v, want unknown, looked for once", a)
	}
	runUploadsUntil(t, svc, "the attempt failed", 20*time.Second, func() bool {
		as = multipartAttempts(t, bucket, "k")
		return as[0].State != lease.StateUnknown
	})
	a := as[0]
	if a.State != lease.StateFailed || !strings.Contains(a.Reason, "no upload at the store") || a.UploadID != "" {
		t.Fatalf("attempt %+v, want failed: no upload at the store", a)
	}
	if age := a.Updated.Sub(a.Created); age < giveUp {
		t.Fatalf("the attempt failed %s after its Create, before the give-up age %s", age, giveUp)
	}
	if fs, code := auditJSON(t, g, bucket); len(fs) != 0 || code != 0 {
		t.Fatalf("audit: %+v, exit %d; want nothing, exit 0", fs, code)
	}
}
