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
	if first.Err == nil && first.Status < 500 {
		t.Fatalf("first PUT: %+v, want a 5xx", first)
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
// store request is held; another writer commits; the released request does
// not overwrite the newer generation.
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
	held.Release()
	a := <-resA
	pgp.Blackhole(false)
	if a.Status == 200 {
		t.Fatalf("the writer that lost its lease got 200: %+v", a)
	}
	if got := getBody(t, g2.Store, bucket, "k"); string(got) != "newer writer" {
		t.Fatalf("store holds %q after the stale request was released", got)
	}
	// The stale write's own fence (If-None-Match: *, the key was absent when it
	// settled) fails at the store now that the key exists.
	stale := putRaw(g2.Store, bucket, "k", []byte("stale writer"), map[string]string{"If-None-Match": "*"})
	if stale.Status != 412 {
		t.Fatalf("the stale fence at the store: %+v, want 412", stale)
	}
	row, _ := catalogOf(t, bucket, "k")
	if row.Generation != b.Generation {
		t.Fatalf("catalog on generation %d, want %d", row.Generation, b.Generation)
	}
	if n := g1.Leases.Metrics; n == nil {
		t.Fatal("no lease metrics")
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
// never learns whether it committed: the bytes are kept and the generation
// exists exactly once.
func TestCommitConnectionCutSettlesOnce(t *testing.T) {
	pgp, pgURL := faultDatabase(t)
	bucket := "t-cutcommit-" + randomSuffix()
	// The hook runs on the gateway's request goroutine: fired is handed over
	// through a channel, armed is guarded by the Once.
	firedCh := make(chan (<-chan struct{}), 1)
	var arm sync.Once
	g := startGateway(t, gatewayOptions{Lease: testLease, DatabaseURL: pgURL, Hooks: lease.Hooks{
		BeforeCommit: func(b, _, _ string) {
			if b != bucket {
				return
			}
			arm.Do(func() {
				// The commit is one statement in an implicit transaction: cut
				// after its Bind, whose parameters carry the state "committed"
				// (length-prefixed, so not the SQL text's "committed_at").
				firedCh <- pgp.CutAfterClientSends([]byte("\x00\x00\x00\x09committed"))
			})
		},
	}})
	createBucket(t, g.Endpoint, bucket)
	first := putRaw(g.Endpoint, bucket, "k", []byte("committed, answer cut"), nil)
	var fired <-chan struct{}
	select {
	case fired = <-firedCh:
	default:
		t.Fatal("the commit hook never ran")
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("the COMMIT was never cut")
	}
	if first.Status < 500 {
		t.Fatalf("first PUT: %+v, want a 5xx (the outcome of its commit is unknown to the gateway)", first)
	}
	// The gateway answered after recording the attempt unknown, which locks
	// the lease row: the cut commit either ran first (committed) or finds the
	// lease released and writes nothing. Either way there is one outcome.
	gens := generationsOf(t, bucket, "k")
	as := attemptsOf(t, bucket, "k")
	if len(as) != 1 {
		t.Fatalf("attempts %+v, want one", as)
	}
	switch as[0].State {
	case "committed":
		if len(gens) != 1 || gens[0].Attempt != as[0].ID {
			t.Fatalf("cut commit committed: generations %+v, want exactly its one", gens)
		}
	case "unknown":
		if len(gens) != 0 {
			t.Fatalf("cut commit left its attempt unknown but generations %+v exist", gens)
		}
	default:
		t.Fatalf("after a cut commit the attempt is %+v, want committed or unknown", as[0])
	}
	t.Logf("the cut commit's attempt is %s", as[0].State)
	second := putRaw(g.Endpoint, bucket, "k", []byte("next"), nil)
	if second.Status != 200 {
		t.Fatalf("next PUT: %+v", second)
	}
	// The first PUT's bytes got exactly one generation (its own commit, or
	// adopted by the next writer's settle), then the next PUT's.
	if gens := generationsOf(t, bucket, "k"); len(gens) != 2 || gens[0].Attempt != as[0].ID || gens[1].Attempt == as[0].ID {
		t.Fatalf("generations %+v, want the first PUT's once and the next", gens)
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
	if first.Err == nil && first.Status < 500 {
		t.Fatalf("first Complete: %+v, want a 5xx", first)
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
