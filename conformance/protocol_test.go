package conformance

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
)

var testLease = lease.Config{TTL: 10 * time.Second, RenewEvery: 2 * time.Second, Margin: 2 * time.Second, WaitMax: 20 * time.Second, DBTimeout: 5 * time.Second}

// Case 1: two clients PUT one key through two gateways (own pools) at once:
// the second waits for the first's lease, a third with its own If-None-Match
// gets 409 meanwhile, and generations increase with the bytes.
func TestConcurrentPutsOneKeyTwoGateways(t *testing.T) {
	fp, fep := faultStore(t)
	waiting := newSignal()
	g1 := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease, DatabaseURL: testenv.DatabaseURL(t)})
	g2 := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease, DatabaseURL: testenv.DatabaseURL(t),
		Hooks: lease.Hooks{Waiting: func(string, string) { waiting.fire() }}})
	bucket := "t-concurrent-" + randomSuffix()
	createBucket(t, g1.Endpoint, bucket)

	held := fp.Hold(faultproxy.MethodPath("PUT", "/"+bucket+"/k"), 1)
	resA := make(chan rawResult, 1)
	go func() { resA <- putRaw(g1.Endpoint, bucket, "k", []byte("first writer"), nil) }()
	<-held.Arrived // A holds the lease and its PUT is at the store's door

	resB := make(chan rawResult, 1)
	go func() { resB <- putRaw(g2.Endpoint, bucket, "k", []byte("second writer"), nil) }()
	waiting.wait(t, "the second writer to wait for the lease")

	c := putRaw(g2.Endpoint, bucket, "k", []byte("conditional"), map[string]string{"If-None-Match": "*"})
	if c.Status != 409 || c.Code != "ConditionalRequestConflict" {
		t.Fatalf("conditional writer while leased: %+v, want 409 ConditionalRequestConflict", c)
	}
	held.Release()
	a, b := <-resA, <-resB
	if a.Status != 200 || b.Status != 200 {
		t.Fatalf("A %+v, B %+v: want both 200 (one after the other)", a, b)
	}
	if !(a.Generation > 0 && b.Generation > a.Generation) {
		t.Fatalf("generations A %d, B %d: want increasing", a.Generation, b.Generation)
	}
	if got := getBody(t, g1.Store, bucket, "k"); string(got) != "second writer" {
		t.Fatalf("store holds %q", got)
	}
	row, _ := catalogOf(t, bucket, "k")
	if row.Generation != b.Generation || row.ETag != b.ETag {
		t.Fatalf("catalog %+v, want generation %d etag %s", row, b.Generation, b.ETag)
	}
	audit(t, g1.Store, bucket, "k")
}

// Case 2: the store writes a PUT but its answer is lost: the client gets a 5xx,
// the attempt is unknown, and the retry first adopts it, then writes: both
// generations, in order.
func TestLostPutResponseIsAdoptedBeforeRetry(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease})
	bucket := "t-lostput-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	dropped := fp.DropResponse(faultproxy.MethodPath("PUT", "/"+bucket+"/k"), 1)
	first := putRaw(g.Endpoint, bucket, "k", []byte("landed, answer lost"), nil)
	if ev := <-dropped; ev.Status != 200 {
		t.Fatalf("the store answered %d to the first PUT", ev.Status)
	}
	// The store's answer never came: 502 from the gateway, never a
	// transport error or another 5xx.
	if first.Err != nil || first.Status != 502 {
		t.Fatalf("first PUT: %+v, want 502", first)
	}
	as := attemptsOf(t, bucket, "k")
	if len(as) != 1 || as[0].State != "unknown" {
		t.Fatalf("attempts after a lost answer: %+v, want one unknown", as)
	}
	second := putRaw(g.Endpoint, bucket, "k", []byte("the retry"), nil)
	if second.Status != 200 {
		t.Fatalf("retry: %+v", second)
	}
	gens := generationsOf(t, bucket, "k")
	if len(gens) != 2 || gens[0].Attempt != as[0].ID || gens[0].Origin != "adopted" || gens[1].Origin != "fencegate" || gens[1].Generation != second.Generation {
		t.Fatalf("generations %+v: want the lost write adopted, then the retry", gens)
	}
	if attemptState(t, as[0].ID) != "adopted" {
		t.Fatalf("first attempt is %s, want adopted", attemptState(t, as[0].ID))
	}
	audit(t, g.Store, bucket, "k")
}

// Case 3: a writer whose renewals are blackholed loses its lease while its
// store request is held; another writer commits; the held request, delivered
// to the store after all, is refused there by its fence and does not
// overwrite the newer generation.
func TestExpiredWriterCannotOverwrite(t *testing.T) {
	fp, fep := faultStore(t)
	pgp, pgURL := faultDatabase(t)
	short := lease.Config{TTL: 2 * time.Second, RenewEvery: 400 * time.Millisecond, Margin: 500 * time.Millisecond, WaitMax: 20 * time.Second, DBTimeout: time.Second}
	g1 := startGateway(t, gatewayOptions{Store: &fep, Lease: short, DatabaseURL: pgURL})
	g2 := startGateway(t, gatewayOptions{Store: &fep, Lease: short, DatabaseURL: testenv.DatabaseURL(t)})
	bucket := "t-expired-" + randomSuffix()
	createBucket(t, g2.Endpoint, bucket)

	held := fp.Hold(faultproxy.MethodPath("PUT", "/"+bucket+"/k"), 1)
	resA := make(chan rawResult, 1)
	go func() { resA <- putRaw(g1.Endpoint, bucket, "k", []byte("stale writer"), nil) }()
	<-held.Arrived
	pgp.Blackhole(true)
	waitFor(t, "the stale writer's lease to expire", 10*time.Second, func() bool { return leaseExpired(t, bucket, "k") })

	b := putRaw(g2.Endpoint, bucket, "k", []byte("newer writer"), nil)
	if b.Status != 200 {
		t.Fatalf("newer writer: %+v", b)
	}
	// The stale writer has given up on its request (its lease is lost), but
	// the request is already on the wire: it reaches the store in full, and
	// the store refuses it by the stale writer's own fence (If-None-Match: *,
	// the key was absent when it settled).
	held.ReleaseDetached()
	a := <-resA
	pgp.Blackhole(false)
	if a.Err != nil || a.Status != 503 || a.Code != "ServiceUnavailable" {
		t.Fatalf("the writer that lost its lease: %+v, want 503 ServiceUnavailable", a)
	}
	select {
	case ev := <-held.Delivered:
		if ev.Status != 412 {
			t.Fatalf("the stale request reached the store, which answered %d, want 412 (its fence)", ev.Status)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stale request never reached the store")
	}
	if got := getBody(t, g2.Store, bucket, "k"); string(got) != "newer writer" {
		t.Fatalf("store holds %q after the stale request was delivered", got)
	}
	row, _ := catalogOf(t, bucket, "k")
	if row.Generation != b.Generation {
		t.Fatalf("catalog on generation %d, want %d", row.Generation, b.Generation)
	}
	// The stale writer noticed the loss itself (its lost-lease counter).
	var lost dto.Metric
	if err := g1.Leases.Metrics.Lost.Write(&lost); err != nil || lost.GetCounter().GetValue() != 1 {
		t.Fatalf("the stale gateway's lost-lease count is %v (%v), want 1", lost.GetCounter().GetValue(), err)
	}
	audit(t, g2.Store, bucket, "k")
}

// Case 5: a commit that waits for the lease row's lock while its lease expires
// is refused: the check runs on clock_timestamp() after the lock is granted.
func TestCommitWaitingForLockPastExpiryIsRefused(t *testing.T) {
	pool := packageKeys(t).Pool
	ctx := context.Background()
	bucket := "t-lockwait-" + randomSuffix()
	locked := newSignal()
	var tx interface {
		Rollback(context.Context) error
	}
	short := lease.Config{TTL: 2 * time.Second, RenewEvery: 400 * time.Millisecond, Margin: 300 * time.Millisecond, WaitMax: 10 * time.Second, DBTimeout: 20 * time.Second}
	g := startGateway(t, gatewayOptions{Lease: short, DatabaseURL: testenv.DatabaseURL(t), Hooks: lease.Hooks{
		BeforeCommit: func(b, k, _ string) {
			if b != bucket || tx != nil {
				return // only the first writer's commit is held
			}
			t2, err := pool.Begin(ctx)
			if err != nil {
				panic(err)
			}
			if _, err := t2.Exec(ctx, `SELECT 1 FROM leases WHERE bucket = $1 AND key = $2 FOR UPDATE`, b, k); err != nil {
				panic(err)
			}
			tx = t2
			locked.fire()
		},
	}})
	createBucket(t, g.Endpoint, bucket)
	res := make(chan rawResult, 1)
	go func() { res <- putRaw(g.Endpoint, bucket, "k", []byte("slow commit"), nil) }()
	locked.wait(t, "the test to lock the lease row")
	waitFor(t, "the commit to wait for the row lock", 10*time.Second, func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND a.query ILIKE '%fencegate_commit%'`).Scan(&n)
		return n > 0
	})
	waitFor(t, "the lease to expire on the database clock", 10*time.Second, func() bool { return leaseExpired(t, bucket, "k") })
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.Status != 503 {
		t.Fatalf("commit after expiry: %+v, want 503", r)
	}
	if gens := generationsOf(t, bucket, "k"); len(gens) != 0 {
		t.Fatalf("an expired writer committed: %+v", gens)
	}
	as := attemptsOf(t, bucket, "k")
	if len(as) != 1 || as[0].State != "unknown" {
		t.Fatalf("attempts %+v, want the refused one unknown", as)
	}
	// Its bytes landed: the next writer adopts them first.
	next := putRaw(g.Endpoint, bucket, "k", []byte("next"), nil)
	if next.Status != 200 {
		t.Fatalf("next writer: %+v", next)
	}
	if gens := generationsOf(t, bucket, "k"); len(gens) != 2 || gens[0].Origin != "adopted" {
		t.Fatalf("generations %+v, want the refused write adopted then the next", gens)
	}
	audit(t, g.Store, bucket, "k")
}

// Case 6: the connection is cut right after the commit is sent, so the gateway
// never learns whether it committed. Either the commit ran at PostgreSQL
// before the gateway recorded the attempt unknown (6a), or after (6b); each
// order is forced in its own test. Either way the bytes get exactly one
// generation.

// cutCommitPattern is in the commit's Bind: its parameters carry the state
// "committed" (length-prefixed, so not the SQL text's "committed_at"). The
// commit is one statement in an implicit transaction.
var cutCommitPattern = []byte("\x00\x00\x00\x09committed")

// armOnFirstCommit returns hooks that call arm once, at the first commit of
// bucket (the hook runs on the gateway's request goroutine; the Once is its
// synchronization).
func armOnFirstCommit(bucket string, arm func()) lease.Hooks {
	var once sync.Once
	return lease.Hooks{BeforeCommit: func(b, _, _ string) {
		if b == bucket {
			once.Do(arm)
		}
	}}
}

// 6a: the commit reaches PostgreSQL and commits; the answer is cut and the
// network goes dark, so the gateway's attempt to record the outcome unknown
// cannot run first. The attempt is committed, its generation exists once,
// and the next write follows it.
func TestCommitCutAfterItCommittedIsKeptOnce(t *testing.T) {
	pgp, pgURL := faultDatabase(t)
	bucket := "t-cutcommitted-" + randomSuffix()
	firedCh := make(chan (<-chan struct{}), 1)
	g := startGateway(t, gatewayOptions{Lease: testLease, DatabaseURL: pgURL, Hooks: armOnFirstCommit(bucket, func() {
		firedCh <- pgp.CutAfterClientSendsThenDark(cutCommitPattern)
	})})
	createBucket(t, g.Endpoint, bucket)
	res := make(chan rawResult, 1)
	go func() { res <- putRaw(g.Endpoint, bucket, "k", []byte("committed, answer cut"), nil) }()
	var fired <-chan struct{}
	select {
	case fired = <-firedCh:
	case <-time.After(30 * time.Second):
		t.Fatal("the commit hook never ran")
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("the commit was never cut")
	}
	// Seen on the package's own pool (not through the dark proxy).
	var attempt string
	waitFor(t, "the cut commit to commit at PostgreSQL", 10*time.Second, func() bool {
		as := attemptsOf(t, bucket, "k")
		if len(as) == 1 && as[0].State == "committed" {
			attempt = as[0].ID
			return true
		}
		return false
	})
	first := <-res
	pgp.Blackhole(false)
	if first.Err != nil || first.Status != 500 || first.Code != "InternalError" {
		t.Fatalf("first PUT: %+v, want 500 InternalError (the outcome of its commit is unknown to the gateway)", first)
	}
	if gens := generationsOf(t, bucket, "k"); len(gens) != 1 || gens[0].Attempt != attempt {
		t.Fatalf("generations %+v, want exactly the cut commit's", gens)
	}
	if s := attemptState(t, attempt); s != "committed" {
		t.Fatalf("the committed attempt became %s", s)
	}
	second := putRaw(g.Endpoint, bucket, "k", []byte("next"), nil)
	if second.Status != 200 {
		t.Fatalf("next PUT: %+v", second)
	}
	if gens := generationsOf(t, bucket, "k"); len(gens) != 2 || gens[0].Attempt != attempt || gens[1].Attempt == attempt {
		t.Fatalf("generations %+v, want the first PUT's once and the next", gens)
	}
	audit(t, g.Store, bucket, "k")
}

// 6b: the connection is cut as the commit is sent, and the commit reaches
// PostgreSQL only after the gateway recorded the attempt unknown and released
// the lease: held behind a lock on the lease row (seen waiting in pg_locks),
// it then finds the lease gone and writes nothing. The next writer adopts the
// landed bytes: one generation for them, then its own.
func TestCommitCutBeforeItRanLeavesUnknown(t *testing.T) {
	pgp, pgURL := faultDatabase(t)
	pool := packageKeys(t).Pool
	ctx := context.Background()
	bucket := "t-cutunknown-" + randomSuffix()
	type cutHandles struct {
		cut, fired <-chan struct{}
		deliver    func()
	}
	armed := make(chan cutHandles, 1)
	g := startGateway(t, gatewayOptions{Lease: testLease, DatabaseURL: pgURL, Hooks: armOnFirstCommit(bucket, func() {
		cut, fired, deliver := pgp.CutAfterClientSendsHeld(cutCommitPattern)
		armed <- cutHandles{cut, fired, deliver}
	})})
	createBucket(t, g.Endpoint, bucket)
	first := putRaw(g.Endpoint, bucket, "k", []byte("landed, commit late"), nil)
	var h cutHandles
	select {
	case h = <-armed:
	default:
		t.Fatal("the commit hook never ran")
	}
	defer h.deliver()
	select {
	case <-h.cut:
	default:
		t.Fatal("the gateway answered but its commit was never cut")
	}
	if first.Err != nil || first.Status != 500 || first.Code != "InternalError" {
		t.Fatalf("first PUT: %+v, want 500 InternalError (the outcome of its commit is unknown to the gateway)", first)
	}
	as := attemptsOf(t, bucket, "k")
	if len(as) != 1 || as[0].State != "unknown" {
		t.Fatalf("attempts %+v before the commit arrives, want one unknown", as)
	}
	// Lock the lease row, let the commit through, and see it wait for the
	// lock: it has arrived and runs after the release.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM leases WHERE bucket = $1 AND key = 'k' FOR UPDATE`, bucket); err != nil {
		t.Fatal(err)
	}
	h.deliver()
	<-h.fired
	commitRunning := func(cond string) func() bool {
		return func() bool {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity a WHERE a.datname = current_database()
				AND a.query ILIKE '%fencegate_commit%' AND a.query NOT ILIKE '%pg_stat_activity%' AND `+cond).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		}
	}
	waitFor(t, "the late commit to wait for the lease row lock", 10*time.Second,
		commitRunning(`EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted)`))
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late commit to finish", 10*time.Second, func() bool { return !commitRunning(`a.state = 'active'`)() })
	if gens := generationsOf(t, bucket, "k"); len(gens) != 0 {
		t.Fatalf("a commit that arrived after the lease was released made generations %+v", gens)
	}
	if s := attemptState(t, as[0].ID); s != "unknown" {
		t.Fatalf("the attempt is %s after its late commit, want unknown", s)
	}
	second := putRaw(g.Endpoint, bucket, "k", []byte("next"), nil)
	if second.Status != 200 {
		t.Fatalf("next PUT: %+v", second)
	}
	gens := generationsOf(t, bucket, "k")
	if len(gens) != 2 || gens[0].Attempt != as[0].ID || gens[0].Origin != "adopted" || gens[1].Generation != second.Generation {
		t.Fatalf("generations %+v, want the first PUT's bytes adopted once, then the next", gens)
	}
	audit(t, g.Store, bucket, "k")
}

// Case 7: a client retries CompleteMultipartUpload after a lost answer and gets
// the same generation; no second one is made.
func TestCompleteRetryGetsSameGeneration(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease})
	ctx := context.Background()
	bucket := "t-complete-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	c := g.S3Client()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("mp")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String("mp"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("the only part"))})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(fmt.Sprintf(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>%s</ETag></Part></CompleteMultipartUpload>`, aws.ToString(part.ETag)))
	path := "/" + bucket + "/mp?uploadId=" + aws.ToString(up.UploadId)
	dropped := fp.DropResponse(faultproxy.MethodPath("POST", "/"+bucket+"/mp"), 1)
	first := doRaw(g.Endpoint, "POST", path, body, nil)
	if ev := <-dropped; ev.Status != 200 {
		t.Fatalf("the store answered %d to the first Complete", ev.Status)
	}
	if first.Err != nil || first.Status != 502 {
		t.Fatalf("first Complete: %+v, want 502", first)
	}
	retry := doRaw(g.Endpoint, "POST", path, body, nil)
	again := doRaw(g.Endpoint, "POST", path, body, nil)
	if retry.Status != 200 || again.Status != 200 || retry.Generation == 0 || retry.Generation != again.Generation {
		t.Fatalf("retries: %+v, %+v: want 200 with one generation", retry, again)
	}
	gens := generationsOf(t, bucket, "mp")
	if len(gens) != 1 || gens[0].Generation != retry.Generation {
		t.Fatalf("generations %+v, want exactly %d", gens, retry.Generation)
	}
	if got := getBody(t, g.Endpoint, bucket, "mp"); string(got) != "the only part" {
		t.Fatalf("object %q", got)
	}
	audit(t, g.Store, bucket, "mp")
}
