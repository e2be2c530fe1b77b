package conformance

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/meta"
)

// PostgreSQL failover under a gateway (issue 33, docs/SCALING.md): a
// primary and a streaming standby behind one multi-host URL
// (target_session_attrs=read-write), the primary killed right after a
// write's acknowledgement and the standby promoted. With synchronous
// replication the acknowledged generation is on the promoted server, the
// gateway follows it without a restart (pool, release listener, session)
// and the next write commits there. With asynchronous replication the
// same acknowledged write can be gone, and the gateway's start-up log said
// so.

// failoverCluster starts a primary, a standby and n gateways on the shared
// test store, with a key of every permission.
func failoverCluster(t *testing.T, async bool, gatewayEnv ...string) (*stack.Cluster, stack.Endpoint) {
	t.Helper()
	requireBinary(t, "haproxy", "scripts/ensure-deps.sh --cluster")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var key meta.AccessKey
	store := testenv.Store(t)
	c, err := stack.StartCluster(ctx, stack.ClusterConfig{
		Dir: filepath.Join(sharedTempDir(t), "cluster"), FencegateBin: fencegateBinary(t), Gateways: 1,
		AsyncStandby: async, ServerKey: serverKey, LogLevel: "info", ExternalStore: &store, GatewayEnv: gatewayEnv,
		Prepare: func(ctx context.Context, url string) error {
			pool, err := meta.Open(ctx, url, meta.PoolConfig{MaxConns: 2})
			if err != nil {
				return err
			}
			defer pool.Close()
			if _, err := meta.Migrate(ctx, pool); err != nil {
				return err
			}
			k, _ := meta.ParseServerKey(serverKey)
			sealer, _ := meta.NewSealer(k)
			key, err = (&meta.Keys{Pool: pool, Sealer: sealer}).Create(ctx, "failover", []meta.Grant{{Bucket: "*", Permission: meta.PermAdmin}})
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c, stack.Endpoint{URL: c.Gateways[0].URL, AccessKey: key.ID, SecretKey: key.Secret, Region: "us-east-1"}
}

// catalogGeneration is the key's committed generation and ETag on pg (0 if none).
func catalogGeneration(t *testing.T, pg *stack.Postgres, bucket, key string) (int64, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL("fencegate"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var gen int64
	var etag *string
	err = conn.QueryRow(ctx, `SELECT generation, etag FROM catalog WHERE bucket = $1 AND key = $2 AND NOT deleted`, bucket, key).Scan(&gen, &etag)
	if err == pgx.ErrNoRows {
		return 0, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	if etag == nil {
		return gen, ""
	}
	return gen, *etag
}

// putUntilCommitted PUTs body at key until the gateway answers 200 and
// returns how long that took from since.
func putUntilCommitted(t *testing.T, cl *s3.Client, bucket, key string, body []byte, since time.Time, limit time.Duration) time.Duration {
	t.Helper()
	var last error
	for time.Since(since) < limit {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, last = cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)})
		cancel()
		if last == nil {
			return time.Since(since)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no PUT committed within %s of the primary's death: %v", limit, last)
	return 0
}

// detachStandby stops standby's WAL receiver (an empty primary_conninfo,
// reloaded) and waits until primary sees no standby.
func detachStandby(t *testing.T, primary, standby *stack.Postgres) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, standby.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ALTER SYSTEM SET primary_conninfo = ''`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	pconn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pconn.Close(ctx)
	for {
		var n int
		if err := pconn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReplayed waits until the standby has replayed everything the primary
// wrote so far (the bucket), so that only what follows can be missing.
func waitReplayed(t *testing.T, primary *stack.Postgres) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for {
		var caught bool
		err := conn.QueryRow(ctx, `SELECT coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false) FROM pg_stat_replication`).Scan(&caught)
		if err != nil {
			t.Fatal(err)
		}
		if caught {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func logMentions(t *testing.T, path, needle string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), needle)
}

// asyncWarning is what the start-up warning says, in every form.
const asyncWarning = "ASYNCHRONOUS REPLICATION"

func TestFailoverSyncStandbyKeepsAcknowledgedWrite(t *testing.T) {
	runs := 1
	if os.Getenv("FENCEGATE_FAILOVER_RUNS") != "" {
		runs = 5 // the measurement docs/SCALING.md quotes
	}
	var took []time.Duration
	for i := 0; i < runs; i++ {
		took = append(took, syncFailoverOnce(t))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("primary death to first write committed on the promoted standby: median %s, max %s over %d (%v)",
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), len(took), took)
}

func syncFailoverOnce(t *testing.T) time.Duration {
	c, ep := failoverCluster(t, false)
	defer c.Stop()
	gw := c.Gateways[0]
	if logMentions(t, gw.LogPath(), asyncWarning) {
		t.Fatalf("gateway on a synchronous standby warned of asynchronous replication:\n%s", gw.LogTail())
	}
	cl := ep.S3Client(noRetries)
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader("first")})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	// Acknowledged: the primary dies at once, the standby is promoted.
	died := time.Now()
	if err := c.Failover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gen, _ := catalogGeneration(t, c.Primary, bucket, "k"); gen == 0 {
		t.Fatal("the acknowledged generation is not on the promoted standby")
	}
	took := putUntilCommitted(t, cl, bucket, "k2", []byte("after"), died, 60*time.Second)
	if got := getBody(t, ep, bucket, "k"); string(got) != "first" {
		t.Fatalf("GET k after the failover = %q, want the acknowledged %q", got, "first")
	}
	// A second generation of the same key commits on the new primary.
	gen1, _ := catalogGeneration(t, c.Primary, bucket, "k")
	putUntilCommitted(t, cl, bucket, "k", []byte("second"), time.Now(), 30*time.Second)
	if gen2, _ := catalogGeneration(t, c.Primary, bucket, "k"); gen2 <= gen1 {
		t.Fatalf("second write's generation %d not after %d", gen2, gen1)
	}
	if got := getBody(t, ep, bucket, "k"); string(got) != "second" {
		t.Fatalf("GET k = %q, want %q", got, "second")
	}
	// The release listener and the session followed the promoted server.
	deadline := time.Now().Add(20 * time.Second)
	for {
		m := metricsOf(t, gw.Admin)
		if m["fencegate_lease_listener_up"] == 1 && m["fencegate_lease_listener_lost_total"] >= 1 && m["fencegate_session_up"] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listener/session not back on the promoted server: listener up %v lost %v, session up %v",
				m["fencegate_lease_listener_up"], m["fencegate_lease_listener_lost_total"], m["fencegate_session_up"])
		}
		time.Sleep(200 * time.Millisecond)
	}
	return took
}

func TestFailoverAsyncStandbyLosesAcknowledgedWrite(t *testing.T) {
	c, ep := failoverCluster(t, true)
	gw := c.Gateways[0]
	if !logMentions(t, gw.LogPath(), asyncWarning) {
		t.Fatalf("gateway on an asynchronous standby did not warn at start:\n%s", gw.LogTail())
	}
	cl := ep.S3Client(noRetries)
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	// The standby falls behind (cut off from the primary, as a slow or
	// broken network would leave it); an asynchronous primary acknowledges
	// without it.
	waitReplayed(t, c.Primary)
	detachStandby(t, c.Primary, c.Standby)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader("acknowledged")})
	cancel()
	if err != nil {
		t.Fatalf("PUT with the standby cut off: %v (an asynchronous primary should not wait for it)", err)
	}
	if gen, _ := catalogGeneration(t, c.Primary, bucket, "k"); gen == 0 {
		t.Fatal("the acknowledged write is not on the primary")
	}
	c.Primary.Crash()
	if err := c.Standby.Promote(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gen, _ := catalogGeneration(t, c.Standby, bucket, "k"); gen != 0 {
		t.Fatalf("the write reached the frozen standby after all (generation %d): the test shows nothing", gen)
	}
	t.Log("asynchronous standby: the acknowledged generation is not on the promoted server, as the start-up warning said")
	// The gateway still follows the promoted server.
	putUntilCommitted(t, cl, bucket, "k2", []byte("after"), time.Now(), 60*time.Second)
	// What a client now sees of the lost generation (docs/SCALING.md).
	res := doRaw(ep, "GET", "/"+bucket+"/k", nil, nil)
	t.Logf("GET of the lost generation after the failover: %d %s generation %d", res.Status, res.Code, res.Generation)
}

// attemptStates lists the key's attempts on pg as "state" strings, oldest first.
func attemptStatesOn(t *testing.T, pg *stack.Postgres, bucket, key string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL("fencegate"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT state FROM attempts WHERE bucket = $1 AND key = $2 ORDER BY created_at`, bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	states, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return states
}

// A write whose body is streaming when the primary dies ends one way or
// the other (committed, or unknown and then settled by the reconciler on
// the promoted server): no attempt stays unresolved and the audit finds
// the catalog and the store agreeing. Promoted at once, the write's lease
// outlives the outage and it commits; promoted after 4 s, longer than the
// lease's local deadline (3 s TTL - 1 s margin), the lease is lost with
// the body in flight.
func TestFailoverInFlightWriteIsSettled(t *testing.T) {
	for _, delay := range []time.Duration{0, 4 * time.Second} {
		t.Run("promoted after "+delay.String(), func(t *testing.T) { inFlightAcrossFailover(t, delay) })
	}
}

func inFlightAcrossFailover(t *testing.T, delay time.Duration) {
	c, ep := failoverCluster(t, false, append(shortLeaseEnv, "FENCEGATE_RECONCILE_INTERVAL=1s", "FENCEGATE_BODY_STALL_TIMEOUT=1m")...)
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	const key, size = "inflight", 1 << 20
	putUntilCommitted(t, ep.S3Client(noRetries), bucket, key, []byte("prior"), time.Now(), 10*time.Second)
	conn := startRawPut(t, ep, bucket, key, size)
	defer conn.Close()
	body := bytes.Repeat([]byte("x"), size)
	if _, err := conn.Write(body[:size/4]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		states := attemptStatesOn(t, c.Primary, bucket, key)
		if len(states) > 0 && states[len(states)-1] == "leased" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leased attempt for the streaming write: %v", states)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.FailoverAfter(context.Background(), delay); err != nil {
		t.Fatal(err)
	}
	_, werr := conn.Write(body[size/4:])
	status := 0
	if werr == nil {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
	}
	deadline = time.Now().Add(90 * time.Second)
	var states []string
	for {
		states = attemptStatesOn(t, c.Primary, bucket, key)
		open := false
		for _, s := range states {
			if s == "leased" || s == "open" || s == "unknown" {
				open = true
			}
		}
		if !open {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the in-flight write's attempt is not settled 90 s after the failover: %v", states)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("in-flight write across the failover: client saw status %d (write error %v); attempts %v", status, werr, states)
	store := testenv.Store(t)
	cmd := exec.Command(fencegateBinary(t), "audit", bucket)
	cmd.Env = append(os.Environ(), "FENCEGATE_DATABASE_URL="+c.DatabaseURL, "FENCEGATE_SERVER_KEY="+serverKey,
		"FENCEGATE_BACKEND_ENDPOINT="+store.URL, "FENCEGATE_BACKEND_ACCESS_KEY_ID="+store.AccessKey,
		"FENCEGATE_BACKEND_SECRET_ACCESS_KEY="+store.SecretKey)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fencegate audit after the in-flight write: %v\n%s", err, out)
	}
}

// Fail over, rebuild the dead primary as the new synchronous standby (a
// fresh base backup on its old port, which the gateway's URL still names),
// and fail back: the gateway follows both promotions without a restart and
// every acknowledged generation is on the server that ends up primary.
func TestFailoverRebuildAndFailBack(t *testing.T) {
	c, ep := failoverCluster(t, false)
	cl := ep.S3Client(noRetries)
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	ctx := context.Background()
	bodies := []string{"on a", "on b", "on b, synchronous", "on a again"}
	putUntilCommitted(t, cl, bucket, "k", []byte(bodies[0]), time.Now(), 10*time.Second)
	first := c.Primary.Dir
	if err := c.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	putUntilCommitted(t, cl, bucket, "k", []byte(bodies[1]), time.Now(), 60*time.Second)
	if err := c.RebuildStandby(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Standby.Dir != first {
		t.Fatalf("rebuilt standby in %s, want the dead primary's folder %s", c.Standby.Dir, first)
	}
	putUntilCommitted(t, cl, bucket, "k", []byte(bodies[2]), time.Now(), 30*time.Second)
	conn, err := pgx.Connect(ctx, c.Primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var state string
	err = conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = $1`, stack.StandbyName).Scan(&state)
	conn.Close(ctx)
	if err != nil || state != "sync" {
		t.Fatalf("rebuilt standby's sync_state = %q (%v), want sync", state, err)
	}
	// Fail back: the last acknowledged generation is on the first server.
	if err := c.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Primary.Dir != first {
		t.Fatalf("after failing back the primary is %s, want %s", c.Primary.Dir, first)
	}
	if got := getBody(t, ep, bucket, "k"); string(got) != bodies[2] {
		t.Fatalf("GET k after failing back = %q, want %q", got, bodies[2])
	}
	putUntilCommitted(t, cl, bucket, "k", []byte(bodies[3]), time.Now(), 60*time.Second)
	if got := getBody(t, ep, bucket, "k"); string(got) != bodies[3] {
		t.Fatalf("GET k = %q, want %q", got, bodies[3])
	}
}
