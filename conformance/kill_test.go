package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Timings of the gateways these tests kill: a dead holder's lease expires
// within seconds. Their reconcilers scan once at start-up and then not again
// for an hour, so the gateway the test names as the settler is the only one
// that settles anything while the test runs.
var (
	// These gateways stream every body (no spool), so a kill can land while
	// a lease is held mid-body; spooled bodies hold no lease until they are
	// whole (spool_test.go).
	shortLeaseEnv = []string{
		"FENCEGATE_LEASE_TTL=3s", "FENCEGATE_LEASE_RENEW=1s", "FENCEGATE_LEASE_MARGIN=1s",
		"FENCEGATE_LEASE_WAIT=5s", noSpoolEnv,
	}
	noSpoolEnv     = "FENCEGATE_SPOOL_MAX=-1"
	noReconcileEnv = "FENCEGATE_RECONCILE_INTERVAL=1h"
)

func envWith(base []string, more ...string) []string {
	return append(append([]string{}, base...), more...)
}

// Issue 5, case 4. Three gateways die at three points of the write protocol:
// A mid-body (SIGKILL from the test), B between the store's acknowledgement
// and the commit, C between taking the lease and sending the first byte (B and
// C at their failpoints). A gateway N starting meanwhile leaves the live
// upload of a fourth gateway L alone (W8). After the TTL, N's reconciler
// settles every dead attempt: B's landed bytes are adopted, A's and C's are
// left unknown (nothing of theirs was published), and the catalog equals the
// store for every key.
func TestKilledGatewaysAreSettled(t *testing.T) {
	ctx := context.Background()
	store := testenv.Store(t)
	bucket := "t-killed-" + randomSuffix()
	kA, kB, kC, kL := "mid-body", "after-store-ack", "after-lease", "live"
	fencegateBinary(t)

	// L is live for the whole test; its upload must survive N's start-up.
	gL := startGatewayProcess(t, store, "FENCEGATE_LEASE_TTL=30s", "FENCEGATE_LEASE_RENEW=5s",
		"FENCEGATE_LEASE_MARGIN=5s", "FENCEGATE_BODY_STALL_TIMEOUT=2m", noReconcileEnv, noSpoolEnv)
	gA := startGatewayProcess(t, store, envWith(shortLeaseEnv, noReconcileEnv)...)
	gB := startGatewayProcess(t, store, envWith(shortLeaseEnv, noReconcileEnv, "FENCEGATE_FAILPOINT=after-store-ack")...)
	var cStoreRequests atomic.Int64
	cStore := store
	cStore.URL = startCountingProxy(t, store.URL, &cStoreRequests)
	gC := startGatewayProcess(t, cStore, envWith(shortLeaseEnv, noReconcileEnv, "FENCEGATE_FAILPOINT=after-lease")...)

	if _, err := gA.S3Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	// kA has an earlier committed generation that A's dead write must not disturb.
	prior := randomBytes(t, 10_000)
	if _, err := gA.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &kA, Body: bytes.NewReader(prior)}); err != nil {
		t.Fatal(err)
	}
	priorRow, ok := catalogOf(t, bucket, kA)
	if !ok || priorRow.Origin != "fencegate" {
		t.Fatalf("prior generation of %s: %+v %v", kA, priorRow, ok)
	}

	// A: killed mid-body, its lease taken and part of the body sent.
	const sizeA = 1 << 20
	connA := startRawPut(t, gA.Endpoint, bucket, kA, sizeA)
	defer connA.Close()
	if _, err := connA.Write(randomBytes(t, sizeA/4)); err != nil {
		t.Fatal(err)
	}
	attemptA := waitLeasedAttempt(t, bucket, kA, 10*time.Second)
	sigkillGateway(t, gA)
	connA.Close()
	t.Logf("A killed mid-body holding attempt %s", attemptA)

	// B: dies at the failpoint after the store acknowledged the write.
	bodyB := randomBytes(t, 100_000)
	_, err := gB.S3Client(noRetries).PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &kB, Body: bytes.NewReader(bodyB)})
	if err == nil {
		t.Fatal("PUT through B succeeded; its failpoint should have killed it")
	}
	requireKilled(t, gB, "B")
	attemptB := onlyLeasedAttempt(t, bucket, kB)
	if obj := storeObjectOf(t, store, bucket, kB); !obj.exists || obj.attempt != attemptB || obj.size != int64(len(bodyB)) {
		t.Fatalf("B died at after-store-ack but the store holds %+v, want attempt %s of %d bytes", obj, attemptB, len(bodyB))
	}
	if _, ok := catalogOf(t, bucket, kB); ok {
		t.Fatal("B's write was committed before its failpoint")
	}
	t.Logf("B killed after the store acknowledged attempt %s (client saw: %v)", attemptB, err)

	// C: dies at the failpoint after taking the lease; nothing reaches the store.
	before := cStoreRequests.Load()
	_, err = gC.S3Client(noRetries).PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &kC, Body: bytes.NewReader(randomBytes(t, 50_000))})
	if err == nil {
		t.Fatal("PUT through C succeeded; its failpoint should have killed it")
	}
	requireKilled(t, gC, "C")
	attemptC := onlyLeasedAttempt(t, bucket, kC)
	if n := cStoreRequests.Load() - before; n != 0 {
		t.Fatalf("C sent %d requests to the store before dying at after-lease", n)
	}
	if obj := storeObjectOf(t, store, bucket, kC); obj.exists {
		t.Fatalf("the store holds %s after C died before sending: %+v", kC, obj)
	}
	t.Logf("C killed after taking the lease for attempt %s, before any store request", attemptC)

	// L: a live upload, half its body sent, lease held.
	const sizeL = 256 << 10
	bodyL := randomBytes(t, sizeL)
	connL := startRawPut(t, gL.Endpoint, bucket, kL, sizeL)
	defer connL.Close()
	if _, err := connL.Write(bodyL[:sizeL/2]); err != nil {
		t.Fatal(err)
	}
	attemptL := waitLeasedAttempt(t, bucket, kL, 10*time.Second)

	// N starts while L's attempt is leased: its start-up scan runs at once,
	// then one every second.
	startN := time.Now()
	gN := startGatewayProcess(t, store, envWith(shortLeaseEnv, "FENCEGATE_RECONCILE_INTERVAL=1s")...)
	t.Logf("N healthy after %s", time.Since(startN).Round(time.Millisecond))
	time.Sleep(time.Second) // at least one reconcile interval beyond the start-up scan

	// After the TTL every dead attempt is settled, by N (the only gateway left
	// that scans).
	deadline := time.Now().Add(30 * time.Second)
	for {
		a, b, c := attemptDetailOf(t, attemptA), attemptDetailOf(t, attemptB), attemptDetailOf(t, attemptC)
		if l := attemptDetailOf(t, attemptL); l.state != "leased" || l.tries != 0 || l.claimed {
			t.Fatalf("L's live attempt was touched while N settled the dead ones: %+v", l)
		}
		if a.state != "leased" && b.state == "adopted" && c.state != "leased" {
			t.Logf("settled %s after N started: A %+v, B %+v, C %+v", time.Since(startN).Round(time.Millisecond), a, b, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead attempts not settled 30 s after N started: A %+v, B %+v, C %+v", a, b, c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Both sides reached the point: N's reconciler settled keys (its counters),
	// and L's attempt was leased all along, never claimed by N's scans.
	nMetrics := metricsOf(t, gN.Admin)
	if nMetrics[`fencegate_settlements_total{kind="adopted"}`] < 1 || nMetrics["fencegate_leases_acquired_total"] < 3 {
		t.Fatalf("N's reconciler did not do the settling: %v", nMetrics)
	}
	t.Logf("N: leases acquired %v, settlements adopted %v, in_sync %v",
		nMetrics["fencegate_leases_acquired_total"], nMetrics[`fencegate_settlements_total{kind="adopted"}`],
		nMetrics[`fencegate_settlements_total{kind="in_sync"}`])
	if l := attemptDetailOf(t, attemptL); l.state != "leased" || l.tries != 0 || l.claimed {
		t.Fatalf("L's attempt after N's scans: %+v", l)
	}

	// L finishes: 200, and its object is intact.
	if _, err := connL.Write(bodyL[sizeL/2:]); err != nil {
		t.Fatalf("L's connection died while N ran: %v", err)
	}
	respL := readRawResponse(t, connL)
	if respL.StatusCode != 200 || respL.Header.Get("x-fencegate-generation") == "" {
		t.Fatalf("L's PUT: %s %v", respL.Status, respL.Header)
	}
	if obj := storeObjectOf(t, store, bucket, kL); obj.attempt != attemptL || obj.size != sizeL {
		t.Fatalf("L's object at the store: %+v, want attempt %s of %d bytes", obj, attemptL, sizeL)
	}
	if got := getBody(t, store, bucket, kL); !bytes.Equal(got, bodyL) {
		t.Fatal("L's object bytes differ from what L sent")
	}
	if row, _ := catalogOf(t, bucket, kL); row.Attempt != attemptL || row.Origin != "fencegate" ||
		strconv.FormatInt(row.Generation, 10) != respL.Header.Get("x-fencegate-generation") {
		t.Fatalf("L's catalog row %+v, response generation %s", row, respL.Header.Get("x-fencegate-generation"))
	}
	if s := attemptState(t, attemptL); s != "committed" {
		t.Fatalf("L's attempt is %s, want committed", s)
	}

	// B's acknowledged write is adopted: a generation with origin adopted and
	// B's attempt id, whose bytes at the store carry it.
	rowB, ok := catalogOf(t, bucket, kB)
	if !ok || rowB.Origin != "adopted" || rowB.Attempt != attemptB || rowB.Deleted {
		t.Fatalf("B's key in the catalog: %+v (known %v), want adopted attempt %s", rowB, ok, attemptB)
	}
	if gens := generationsOf(t, bucket, kB); len(gens) != 1 || gens[0].Attempt != attemptB {
		t.Fatalf("B's key generations: %+v", gens)
	}
	if obj := storeObjectOf(t, store, bucket, kB); obj.attempt != attemptB || obj.etag != rowB.ETag {
		t.Fatalf("B's bytes at the store %+v, catalog %+v", obj, rowB)
	}
	if got := getBody(t, store, bucket, kB); !bytes.Equal(got, bodyB) {
		t.Fatal("B's adopted bytes differ from what was sent")
	}

	// A's and C's attempts are unknown (their holders died: nothing proves
	// them unwritten, and no later commit could), and nothing of
	// theirs is published: kA still holds its earlier generation, kC nothing.
	for _, c := range []struct{ name, key, attempt string }{{"A", kA, attemptA}, {"C", kC, attemptC}} {
		d := attemptDetailOf(t, c.attempt)
		if d.state != "unknown" {
			t.Errorf("%s's attempt is %s, want unknown", c.name, d.state)
		}
		t.Logf("%s's attempt: %+v", c.name, d)
		for _, g := range generationsOf(t, bucket, c.key) {
			if g.Attempt == c.attempt {
				t.Errorf("%s's attempt was published as generation %d", c.name, g.Generation)
			}
		}
	}
	if obj := storeObjectOf(t, store, bucket, kA); obj.attempt != priorRow.Attempt || obj.etag != priorRow.ETag {
		t.Fatalf("kA at the store: %+v, want the earlier generation %+v", obj, priorRow)
	}
	if row, _ := catalogOf(t, bucket, kA); row != priorRow {
		t.Fatalf("kA's catalog moved from %+v to %+v", priorRow, row)
	}
	if obj := storeObjectOf(t, store, bucket, kC); obj.exists {
		t.Fatalf("kC at the store: %+v", obj)
	}
	if _, ok := catalogOf(t, bucket, kC); ok {
		t.Fatal("kC has a catalog row")
	}
	audit(t, store, bucket, kA, kB, kC, kL)
}

// Issue 5, case 9 (second half): a gateway killed mid-body, and a client that
// disconnects mid-body through a live gateway process, leave no object at
// versitygw's posix backend, a store that keeps truncated bodies.
func TestKilledMidBodyLeavesNoObjectOnVersitygw(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v, err := stack.StartVersitygwPosix(ctx, stack.VersitygwPath(), t.TempDir(), "FGVGWKILLED0000001", "versitygw-killed-secret-0000000000000000")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	fencegateBinary(t)
	bucket := "t-vgw-killed-" + randomSuffix()
	if _, err := v.S3Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	// The hazard: sent to versitygw directly, a truncated body is published.
	if !storeKeepsTruncated(t, v.Endpoint, bucket, "direct") {
		t.Fatal("versitygw posix no longer keeps a truncated body sent to it directly: this test cannot show that fencegate prevents it")
	}
	proxy, vp := proxyFor(t, v.Endpoint)

	killed := startGatewayProcess(t, vp, envWith(shortLeaseEnv, noReconcileEnv)...)
	const size = 1 << 20
	watch := proxy.Watch(faultproxy.MethodPath("PUT", "/"+bucket+"/killed"), 1)
	conn := startRawPut(t, killed.Endpoint, bucket, "killed", size)
	defer conn.Close()
	if _, err := conn.Write(randomBytes(t, size/2)); err != nil {
		t.Fatal(err)
	}
	attempt := waitLeasedAttempt(t, bucket, "killed", 10*time.Second)
	waitEvent(t, watch.Started, "the killed gateway's write to reach the store")
	sigkillGateway(t, killed)
	conn.Close()
	waitEvent(t, watch.Done, "the store to see the killed gateway's write end")
	// The store publishes a truncated body sent after that end: it has acted
	// on the cut request by then.
	if !storeKeepsTruncated(t, v.Endpoint, bucket, "killed.barrier") {
		t.Fatal("the store did not publish the barrier (a truncated body sent to it directly)")
	}
	if obj := storeObjectOf(t, v.Endpoint, bucket, "killed"); obj.exists {
		t.Fatalf("a gateway killed mid-body left an object at versitygw: %+v", obj)
	}

	// A live gateway process: a client that cuts its body leaves nothing, and
	// its reconciler settles the killed gateway's attempt after the TTL.
	live := startGatewayProcess(t, vp, envWith(shortLeaseEnv, "FENCEGATE_RECONCILE_INTERVAL=1s")...)
	if truncatedPut(t, live.Endpoint, proxy, v.Endpoint, bucket, "client-cut") {
		t.Fatal("a client's truncated upload through a gateway process left an object at versitygw")
	}
	waitFor(t, "the killed gateway's attempt to be settled", 30*time.Second, func() bool {
		return attemptDetailOf(t, attempt).state != "leased"
	})
	if obj := storeObjectOf(t, v.Endpoint, bucket, "killed"); obj.exists {
		t.Fatalf("object appeared at versitygw after settling: %+v", obj)
	}
	t.Logf("killed gateway's attempt: %+v; client-cut attempts: %v", attemptDetailOf(t, attempt), attemptStates(t, bucket, "client-cut"))
	audit(t, v.Endpoint, bucket, "killed", "client-cut")
}

// noRetries: PUTs reach the gateway once (a retry would only meet a dead port).
func noRetries(o *s3.Options) { o.RetryMaxAttempts = 1 }

// sigkillGateway kills a gateway process with SIGKILL and waits for it to exit.
func sigkillGateway(t *testing.T, g *gatewayProcess) {
	t.Helper()
	if err := g.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	requireKilled(t, g, "the gateway")
}

// requireKilled waits for a gateway process to exit and checks that SIGKILL
// ended it (a failpoint, or the test), not a crash or a clean exit.
func requireKilled(t *testing.T, g *gatewayProcess, name string) {
	t.Helper()
	exited, err := g.proc.Exited(15 * time.Second)
	if !exited {
		t.Fatalf("%s did not exit", name)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("%s exited with %v, want SIGKILL", name, err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		b, _ := os.ReadFile(g.proc.LogPath())
		t.Fatalf("%s exited with %v, want SIGKILL; log:\n%s", name, err, b)
	}
}

// waitLeasedAttempt waits until the key has an attempt in state leased and
// returns its id.
func waitLeasedAttempt(t *testing.T, bucket, key string, limit time.Duration) string {
	t.Helper()
	var id string
	waitFor(t, "a leased attempt on "+key, limit, func() bool {
		err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT attempt_id::text FROM attempts
			WHERE bucket = $1 AND key = $2 AND state = 'leased' ORDER BY created_at DESC LIMIT 1`, bucket, key).Scan(&id)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		return err == nil
	})
	return id
}

// onlyLeasedAttempt is the key's one attempt, which must be leased.
func onlyLeasedAttempt(t *testing.T, bucket, key string) string {
	t.Helper()
	rows, err := packageKeys(t).Pool.Query(context.Background(), `SELECT attempt_id::text, state FROM attempts WHERE bucket = $1 AND key = $2`, bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ ID, State string }
	as, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].State != "leased" {
		t.Fatalf("attempts on %s: %+v, want one leased", key, as)
	}
	return as[0].ID
}

// attemptDetail is what the tests read of an attempt row.
type attemptDetail struct {
	state   string
	reason  string
	tries   int
	claimed bool // a reconciler's claim token is on it
}

func attemptDetailOf(t *testing.T, id string) attemptDetail {
	t.Helper()
	var d attemptDetail
	if err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT state, coalesce(reason, ''), tries, claim_token IS NOT NULL
		FROM attempts WHERE attempt_id = $1`, id).Scan(&d.state, &d.reason, &d.tries, &d.claimed); err != nil {
		t.Fatal(err)
	}
	return d
}

// storeObject is what a HEAD straight at the store shows.
type storeObject struct {
	exists  bool
	etag    string
	attempt string
	size    int64
}

func storeObjectOf(t *testing.T, store stack.Endpoint, bucket, key string) storeObject {
	t.Helper()
	head, err := store.S3Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(key)})
	var ae smithy.APIError
	if errors.As(err, &ae) && (ae.ErrorCode() == "NotFound" || ae.ErrorCode() == "NoSuchKey") {
		return storeObject{}
	}
	if err != nil {
		t.Fatalf("HEAD %s at the store: %v", key, err)
	}
	return storeObject{exists: true, etag: trimQuotes(aws.ToString(head.ETag)), attempt: head.Metadata["fencegate-attempt"],
		size: aws.ToInt64(head.ContentLength)}
}

// readRawResponse reads the answer to a raw request on conn.
func readRawResponse(t *testing.T, conn net.Conn) *http.Response {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// metricsOf reads a gateway's /metrics as series -> value (unlabelled or
// labelled series names as printed).
func metricsOf(t *testing.T, admin string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(readAllClose(t, resp.Body)), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}
