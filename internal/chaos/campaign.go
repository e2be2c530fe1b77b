// Package chaos is fencegate's fault campaign (docs/CHAOS.md): three gateway
// processes on one PostgreSQL and one SeaweedFS, clients over a small key
// space through random gateways, faults from a seeded schedule (processes
// killed, restarted and stopped at failpoints, the database and the store
// restarted, store requests stalled, held, reset, failed and their answers
// dropped, a gateway cut off from its database, clients gone mid-body, writes
// straight at the store, hostile requests), a history of every operation
// checked for linearizability (internal/chaos/history, porcupine), and at
// the end an audit: the catalog equal to the store for every key, nothing
// left leased, every gateway healthy. Config.Cluster runs the
// production-shaped stack instead (clusterstack.go): a primary and a
// standby, SeaweedFS in its parts, HAProxy in front of the gateways, and the
// faults those parts allow.
package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/chaos/history"
)

// Config is one campaign.
type Config struct {
	Seed       uint64
	Duration   time.Duration // of the workload under faults
	FaultEvery time.Duration // mean time between faults (default 8 s)
	Faults     []string      // kinds to inject (default AllFaults)
	Clients    int           // default 6
	Gateways   int           // default 3
	Bin        string        // the fencegate binary to run
	Dir        string        // where the stack lives and a failing run's evidence goes
	Log        func(format string, args ...any)
	// CheckTimeout bounds the linearizability check (default 5 minutes).
	CheckTimeout time.Duration
	// Replay is the command that replays a run, with %d for the seed and %s
	// for the duration (default: make chaos).
	Replay string
	// LatePutsOnly: the store-late fault holds PutObjects only, the writes
	// whose late landing the history can prove. A late DeleteObject, copy or
	// CompleteMultipartUpload stays an unknown outcome that may have landed
	// at any time (its attempt is not bounded by a superseding generation),
	// so a campaign that must catch a broken fence holds none of them.
	LatePutsOnly bool
	// Cluster runs the production-shaped stack (`make chaos
	// CHAOS_STACK=cluster`, docs/SCALING.md, clusterstack.go): PostgreSQL
	// as a primary with a synchronous standby, every gateway on a
	// multi-host URL; SeaweedFS as a master, three volume servers, a filer
	// and its S3 gateway; HAProxy in front of the gateways, which a third
	// of the clients send through. It adds ClusterFaults to the kinds.
	Cluster bool
	// Reservations is how many reservation workers run beside the clients
	// (reservations.go; default 2, negative for none).
	Reservations int
	// LateReservationPuts: the store-late fault holds PUTs under a
	// reservation only (`make chaos CHAOS_LATE=reservations`): bytes that
	// may reach the store after their reservation ended and was swept.
	LateReservationPuts bool
}

// The key space: a few keys per bucket so that writers meet constantly, and
// a bucket of copy sources that never change. One key is spelled the hard
// way: a space, '+' and '%' (encoded apart in paths, queries and events) and
// U+0001, which an XML listing without encoding-type=url cannot name; the
// audits and the notifications must name it all the same. The last, bigKey,
// takes large values (prefixFor) and is drawn less often (bigKeyOdds).
var (
	campaignBuckets = []string{"chaos-a", "chaos-b", "chaos-c"}
	campaignKeys    = []string{"k0", "k1", "k2", "dir/k3", "k4 +%\x01", bigKey}
	sourceBucket    = "chaos-src"
	badInputBucket  = "chaos-bad"
)

// Campaign is a running campaign.
type Campaign struct {
	cfg     Config
	stack   *campaignStack
	rec     *recorder
	clients *clients
	etags   *etagBook
	sources []string
	resv    *reservationLog
	notify  *notifications // the campaign's notification targets (notifications.go)

	mu         sync.Mutex
	violations []string // found while the campaign runs (the bad-input corpus)
}

func (c *Campaign) addViolation(v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, v)
}

func (c *Campaign) logf(format string, args ...any) {
	if c.cfg.Log != nil {
		c.cfg.Log(format, args...)
	}
}

// pickGateway is a random gateway that is up (-1, "" if none is).
func (c *Campaign) pickGateway(rng *rand.Rand) (int, string) { return c.pickGatewayExcept(rng, -1) }

// pickGatewayExcept is a random gateway other than except that is up.
func (c *Campaign) pickGatewayExcept(rng *rand.Rand, except int) (int, string) {
	n := len(c.stack.gateways)
	first := rng.IntN(n)
	for i := range n {
		gi := (first + i) % n
		if u := c.stack.gateways[gi].URL(); gi != except && u != "" {
			return gi, u
		}
	}
	return -1, ""
}

// gatewayURL is gateway gi's URL ("" while it is down), or the balancer's
// for history.Balancer.
func (c *Campaign) gatewayURL(gi int) string {
	if gi == history.Balancer {
		return c.stack.balancer.URL
	}
	return c.stack.gateways[gi].URL()
}

// bigKey's writes write large values; one operation in bigKeyOdds is on it
// (in a random bucket), so that its traffic (13 MiB a write on average) stays
// a small part of the campaign's.
const (
	bigKey     = "big"
	bigKeyOdds = 24
)

func (c *Campaign) pickKey(rng *rand.Rand) (bucket, key string) {
	bucket = campaignBuckets[rng.IntN(len(campaignBuckets))]
	if rng.IntN(bigKeyOdds) == 0 {
		return bucket, bigKey
	}
	return bucket, campaignKeys[rng.IntN(len(campaignKeys)-1)]
}

// Run runs a campaign: start the stack, the workload and the faults for
// cfg.Duration, then stop the faults, let the reconciler settle, read every
// key, audit, and check the history.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.FaultEvery == 0 {
		cfg.FaultEvery = 8 * time.Second
	}
	if cfg.Faults == nil {
		cfg.Faults = AllFaults
		if cfg.Cluster {
			cfg.Faults = append(append([]string(nil), AllFaults...), ClusterFaults...)
		}
	}
	for _, k := range cfg.Faults {
		switch {
		case slices.Contains(ClusterFaults, k) && !cfg.Cluster:
			return nil, fmt.Errorf("fault %s needs the cluster stack (CHAOS_STACK=cluster)", k)
		case !slices.Contains(AllFaults, k) && !slices.Contains(ClusterFaults, k):
			return nil, fmt.Errorf("no fault kind %q (kinds: %s, and on the cluster %s)", k, strings.Join(AllFaults, ","), strings.Join(ClusterFaults, ","))
		}
	}
	if cfg.Clients == 0 {
		cfg.Clients = 6
	}
	if cfg.Gateways == 0 {
		cfg.Gateways = 3
	}
	if cfg.Reservations == 0 {
		cfg.Reservations = 2
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = 5 * time.Minute
	}
	began := time.Now()
	st, err := startStack(ctx, cfg.Dir, cfg.Bin, cfg.Gateways, nil, cfg.Cluster)
	if err != nil {
		return nil, err
	}
	defer st.stop()
	c := &Campaign{cfg: cfg, stack: st, etags: newETagBook(), clients: &clients{key: st.client, by: map[string]*s3.Client{}}}
	defer func() { c.notify.stop() }()
	if err := c.setUp(ctx); err != nil {
		return nil, err
	}
	if err := c.setUpNotifications(ctx); err != nil {
		return nil, err
	}
	if cfg.Replay == "" {
		cfg.Replay = "make chaos CHAOS_SEED=%d CHAOS_DURATION=%s"
	}
	rep := &Report{Seed: cfg.Seed, Duration: cfg.Duration, Dir: cfg.Dir, replay: cfg.Replay}
	rep.Faults = schedule(cfg.Seed, cfg.Duration, cfg.FaultEvery, cfg.Faults, cfg.Gateways)
	c.logf("seed %d: %s of workload, %d faults planned, stack in %s", cfg.Seed, cfg.Duration, len(rep.Faults), cfg.Dir)

	c.rec = &recorder{start: time.Now()}
	workCtx, stopWork := context.WithTimeout(ctx, cfg.Duration)
	defer stopWork()
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		w := &worker{id: i, c: c, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i+1))), lastRead: map[string]string{}}
		// On the cluster, every third client sends through HAProxy.
		w.viaBalancer = cfg.Cluster && i%3 == 2
		wg.Add(1)
		go func() { defer wg.Done(); w.run(workCtx) }()
	}
	c.startReservations(workCtx, &wg)
	for i := range rep.Faults {
		f := &rep.Faults[i]
		if wait := f.At - time.Duration(c.rec.now()); wait > 0 {
			sleep(workCtx, wait)
		}
		if workCtx.Err() != nil {
			rep.Faults = rep.Faults[:i]
			break
		}
		c.inject(workCtx, f)
		c.logf("%6.1fs %-18s gateway %d %s %s %s", float64(f.Start)/1e9, f.Kind, f.Target, f.Pause, f.Detail, f.Err)
	}
	<-workCtx.Done()
	wg.Wait()
	c.logf("workload stopped after %s; settling", time.Since(c.rec.start).Round(time.Second))

	c.finish(ctx, rep)
	rep.Elapsed = time.Since(began)
	return rep, nil
}

// setUp creates the buckets and the copy sources through a gateway.
func (c *Campaign) setUp(ctx context.Context) error {
	cl := c.clients.get(c.stack.gateways[0].URL())
	for _, b := range append([]string{sourceBucket, badInputBucket}, campaignBuckets...) {
		if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			return fmt.Errorf("create bucket %s: %w", b, err)
		}
	}
	for i := range 3 {
		v := fmt.Sprintf("src%d", i)
		body := bodyOf(v)
		if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(sourceBucket), Key: aws.String(v), Body: strings.NewReader(string(body))}); err != nil {
			return fmt.Errorf("put source %s: %w", v, err)
		}
		c.etags.add(v, md5Hex(body))
		c.sources = append(c.sources, v)
	}
	return c.setUpReservations(ctx)
}

// audit runs `fencegate audit` on bucket until it finds the catalog equal to
// the store (90 s at most: a settle or the reconciler's audit pass may still
// be on its way); if it never does, the error says what it found and what
// the catalog holds about those keys.
func (c *Campaign) audit(ctx context.Context, db *catalog, bucket string) error {
	var last string
	err := waitUntil(ctx, 90*time.Second, func() error {
		out, err := c.stack.tool(ctx, "audit", "--json", bucket)
		last = out
		if err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(out))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit %s: %v%s", bucket, err, db.auditDiagnosis(ctx, bucket, last))
	}
	return nil
}

// finish ends the faults, waits for the gateways and the reconciler, makes a
// last write and read of every key, resolves unknown outcomes from the
// attempts' records, audits, and checks the history.
func (c *Campaign) finish(ctx context.Context, rep *Report) {
	s := c.stack
	c.mu.Lock()
	problems := append([]string(nil), c.violations...)
	c.mu.Unlock()
	for _, g := range s.gateways {
		g.storeHTTP.Reset()
		g.blackholeDB(false)
		if g.URL() == "" {
			if err := s.startGateway(ctx, g, ""); err != nil {
				problems = append(problems, err.Error())
			}
		}
	}
	if s.cluster {
		if err := s.restoreCluster(ctx); err != nil {
			problems = append(problems, "restoring the cluster's parts: "+err.Error())
		}
	}
	if err := waitUntil(ctx, 90*time.Second, s.healthy); err != nil {
		problems = append(problems, "gateways not healthy after the faults: "+err.Error())
	}
	db, err := openCatalog(ctx, s.adminDB)
	if err != nil {
		rep.Violations = append(rep.Violations, "catalog: "+err.Error())
		return
	}
	defer db.close()

	// Nothing stays leased once the gateways are back (a dead gateway's keys
	// are free after its session times out).
	if err := waitUntil(ctx, 120*time.Second, func() error { return db.leased(ctx) }); err != nil {
		problems = append(problems, "after the faults: "+err.Error())
	}
	// The store may still be warming up after a late restart (SeaweedFS
	// takes seconds to find its writable volumes again, longer than the
	// gateways' store answer timeout, so their writes meanwhile are given
	// up); the final writes are about the gateways, not that.
	if err := waitUntil(ctx, 60*time.Second, c.storeTakesWrites); err != nil {
		problems = append(problems, "the store took no write at once after the faults: "+err.Error())
	}
	// Every key takes a write (none stays stuck: a PUT that finds its key
	// changed around the gateways may get one 503, the next must succeed).
	for i, b := range campaignBuckets {
		for j, k := range campaignKeys {
			w := &worker{id: 1000, c: c, rng: rand.New(rand.NewPCG(rep.Seed, 999)), lastRead: map[string]string{}}
			gi := (i + j) % len(s.gateways)
			var last history.Op
			for try := 0; try < 2; try++ {
				w.put(c.clients.get(s.gateways[gi].URL()), gi, b, k, history.NoCond)
				ops := c.rec.snapshot()
				if last = ops[len(ops)-1]; last.Outcome == history.OK {
					break
				}
			}
			if last.Outcome != history.OK {
				problems = append(problems, fmt.Sprintf("%s/%s: two PUTs after the faults failed, the last: %s %s", b, k, last.Outcome, last.Detail))
			}
		}
	}
	// Nothing the final writes took stays leased. Unknown attempts may stay:
	// a guard ends only when its bytes are found or its horizon (20 min, far
	// past a campaign) has passed (docs/DESIGN.md, "When a guard ends"); the
	// report counts them (leftover), and the check holds each to its fence.
	if err := waitUntil(ctx, 120*time.Second, func() error { return db.leased(ctx) }); err != nil {
		problems = append(problems, "after the final writes: "+err.Error())
	}
	readers := make([]int, len(s.gateways))
	for gi := range s.gateways {
		readers[gi] = gi
	}
	if s.cluster {
		readers = append(readers, history.Balancer)
	}
	for i, gi := range readers {
		w := &worker{id: 1001 + i, c: c, lastRead: map[string]string{}}
		for _, b := range campaignBuckets {
			for _, k := range campaignKeys {
				w.get(c.clients.get(c.gatewayURL(gi)), gi, b, k)
			}
		}
	}
	if err := s.healthy(); err != nil {
		problems = append(problems, "gateways not healthy at the end: "+err.Error())
	}
	// The audit: the catalog equal to the store for every key, no bytes
	// without a catalog entry or a guard (direct writes made in the last
	// seconds are found and recorded by the reconciler's audit pass).
	for _, b := range campaignBuckets {
		if err := c.audit(ctx, db, b); err != nil {
			problems = append(problems, err.Error())
		}
	}

	var resvProblems []string
	rep.Reservations, resvProblems = c.finishReservations(ctx, db)
	problems = append(problems, resvProblems...)
	problems = append(problems, c.finishNotifications(ctx, db, rep)...)

	ops := c.rec.snapshot()
	var err2 error
	rep.Unknown, err2 = db.settleUnknowns(ctx, ops, c.rec.start)
	if err2 != nil {
		problems = append(problems, "settling unknown outcomes from the catalog: "+err2.Error())
	}
	rep.Leftover, _ = db.leftover(ctx)
	gens, err := db.generations(ctx)
	if err != nil {
		problems = append(problems, "generations: "+err.Error())
	}
	problems = append(problems, history.LostAcks(ops, gens)...)
	problems = append(problems, history.RealTimeGenerations(ops)...)
	res := history.Check(ops, c.cfg.CheckTimeout)
	rep.check = &res
	rep.Checked = res.String()
	if !res.Ok() {
		// A check out of time proves nothing either way: the run fails, but
		// only an illegal history says "not linearizable".
		rep.NotLinearizable = res.Verdict == history.Illegal
		problems = append(problems, rep.Checked)
	}
	rep.history = ops
	rep.Ops = len(ops)
	rep.OpCounts = countOps(ops)
	rep.FaultCount = map[string]int{}
	for _, f := range rep.Faults {
		rep.FaultCount[f.Kind]++
	}
	rep.Violations = append(rep.Violations, problems...)
}

func waitUntil(ctx context.Context, limit time.Duration, cond func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, 500*time.Millisecond)
	}
}
