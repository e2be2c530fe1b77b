package main

// The capacity mode (-capacity, `make bench-capacity`, issue 33): the cluster
// stack (internal/stack.StartCluster: PostgreSQL primary and synchronous
// standby, SeaweedFS master, 3 volume servers, filer and S3, N gateways
// behind HAProxy) with 1, 2 and 3 gateways, each under the same offered load
// through HAProxy, and what every part spends per operation. Everything runs
// on one machine, so what it measures is CPU per operation, not any part's
// throughput; capacitydocs.go turns the costs into docs/SCALING.md's sizing
// table.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/meta"
)

// capacityConfig is the offered load, the same for every gateway count.
type capacityConfig struct {
	Gateways    []int   `json:"gateways"`
	SizeBytes   int64   `json:"size_bytes"`
	PutPerS     float64 `json:"put_per_s"`     // offered, open loop
	GetPerS     float64 `json:"get_per_s"`     // offered, open loop
	PhaseSecs   float64 `json:"phase_seconds"` // each of PUT and GET
	IdleSecs    float64 `json:"idle_seconds"`  // the background window before the load
	HotClients  int     `json:"hot_clients"`   // closed loop on one key
	HotSecs     float64 `json:"hot_seconds"`
	MaxInFlight int     `json:"max_in_flight"` // past it an arrival is dropped and counted late
	LogLevel    string  `json:"gateway_log_level"`
}

// roleCPU is CPU seconds (cumulative, or per operation in ms once divided)
// for each part of the cluster.
type roleCPU struct {
	PGPrimary float64 `json:"pg_primary"`
	PGStandby float64 `json:"pg_standby"`
	Gateways  float64 `json:"gateways"` // all of them, summed
	HAProxy   float64 `json:"haproxy"`
	Master    float64 `json:"weed_master"`
	Volumes   float64 `json:"weed_volumes"` // all volume servers, summed
	Filer     float64 `json:"weed_filer"`
	S3        float64 `json:"weed_s3"`
	Client    float64 `json:"client"` // this process: the load generator
}

func (r roleCPU) store() float64 { return r.Master + r.Volumes + r.Filer + r.S3 }

func (r roleCPU) sub(o roleCPU) roleCPU {
	return roleCPU{r.PGPrimary - o.PGPrimary, r.PGStandby - o.PGStandby, r.Gateways - o.Gateways, r.HAProxy - o.HAProxy,
		r.Master - o.Master, r.Volumes - o.Volumes, r.Filer - o.Filer, r.S3 - o.S3, r.Client - o.Client}
}

func (r roleCPU) scale(k float64) roleCPU {
	return roleCPU{r.PGPrimary * k, r.PGStandby * k, r.Gateways * k, r.HAProxy * k,
		r.Master * k, r.Volumes * k, r.Filer * k, r.S3 * k, r.Client * k}
}

// capacityPhase is one measured load: its rate, latency and costs.
type capacityPhase struct {
	Op            string  `json:"op"`
	OfferedPerS   float64 `json:"offered_per_s"`
	AchievedPerS  float64 `json:"achieved_per_s"`
	Ops           int     `json:"ops"`
	Errors        int     `json:"errors"`
	Late          int     `json:"late"` // arrivals dropped: MaxInFlight requests already open
	Seconds       float64 `json:"seconds"`
	P50Ms         float64 `json:"p50_ms"` // from the arrival's scheduled time
	P99Ms         float64 `json:"p99_ms"`
	CPUMsPerOp    roleCPU `json:"cpu_ms_per_op"`
	WriteTxnPerOp float64 `json:"pg_write_txns_per_op"` // on the primary
	FirstError    string  `json:"first_error,omitempty"`
}

// capacityRun is one cluster: its gateway count and what it measured.
type capacityRun struct {
	Gateways    int             `json:"gateways"`
	LoadBefore  string          `json:"loadavg_before"` // /proc/loadavg at the run's start and end
	LoadAfter   string          `json:"loadavg_after"`
	IdleCPUPerS roleCPU         `json:"idle_cpu_ms_per_s"` // background: CPU ms per second with no load
	IdleTxnPerS float64         `json:"idle_pg_write_txns_per_s"`
	Phases      []capacityPhase `json:"phases"` // PUT, GET, then the hot key
}

// capacityResults is docs/capacity-results.json.
type capacityResults struct {
	Date    string         `json:"date"`
	CPUs    int            `json:"cpus"`
	Model   string         `json:"cpu_model"`
	Config  capacityConfig `json:"config"`
	Runs    []capacityRun  `json:"runs"`
	Seconds float64        `json:"seconds"`
}

const opPUTHotCluster = "PUT1KEY"

// runCapacity measures every gateway count in cfg and writes the results to
// out and the generated section of scalingDoc (either empty: skipped).
func runCapacity(ctx context.Context, cfg capacityConfig, fgBin, out, scalingDoc string) error {
	began := time.Now()
	m := machineInfo()
	res := capacityResults{Date: m.date, CPUs: m.nproc, Model: m.model, Config: cfg}
	tmp, err := os.MkdirTemp("", "fencebench-capacity-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	_ = os.Chmod(tmp, 0o755) // PostgreSQL may run as another user
	if fgBin == "" {
		fgBin = filepath.Join(tmp, "fencegate")
		if err := stack.BuildFencegate(ctx, fgBin); err != nil {
			return err
		}
	}
	weedBin, err := stack.EnsureWeed(ctx, os.Stderr)
	if err != nil {
		return err
	}
	payload := make([]byte, cfg.SizeBytes)
	_, _ = rand.Read(payload)
	for _, n := range cfg.Gateways {
		run, err := capacityOne(ctx, cfg, n, filepath.Join(tmp, fmt.Sprintf("cluster-%d", n)), fgBin, weedBin, payload)
		if err != nil {
			return fmt.Errorf("%d gateways: %w", n, err)
		}
		res.Runs = append(res.Runs, run)
	}
	res.Seconds = time.Since(began).Seconds()
	printCapacity(os.Stdout, res)
	if out != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if scalingDoc != "" {
		if err := writeCapacitySection(scalingDoc, res); err != nil {
			return err
		}
	}
	for _, r := range res.Runs {
		for _, p := range r.Phases {
			if p.Errors > 0 {
				return fmt.Errorf("%d gateways, %s: %d requests failed, first: %s", r.Gateways, p.Op, p.Errors, p.FirstError)
			}
		}
	}
	return nil
}

// capacityOne starts the cluster with n gateways in dir, drives the load and
// stops it.
func capacityOne(ctx context.Context, cfg capacityConfig, n int, dir, fgBin, weedBin string, payload []byte) (capacityRun, error) {
	run := capacityRun{Gateways: n, LoadBefore: loadAvg()}
	fmt.Fprintf(os.Stderr, "capacity: starting the cluster stack with %d gateway(s) (load %s) ...\n", n, run.LoadBefore)
	storeAccess, storeSecret := meta.NewKeyPair("FGSTORE")
	serverKey := meta.NewServerKey()
	var key meta.AccessKey
	c, err := stack.StartCluster(ctx, stack.ClusterConfig{
		Dir: dir, FencegateBin: fgBin, WeedBin: weedBin, Gateways: n, Durable: true,
		ServerKey: serverKey, StoreAccess: storeAccess, StoreSecret: storeSecret, LogLevel: cfg.LogLevel,
		Prepare: func(ctx context.Context, url string) error {
			pool, err := meta.Open(ctx, url, meta.PoolConfig{MaxConns: 2})
			if err != nil {
				return err
			}
			defer pool.Close()
			if _, err := meta.Migrate(ctx, pool); err != nil {
				return err
			}
			k, err := meta.ParseServerKey(serverKey)
			if err != nil {
				return err
			}
			sealer, err := meta.NewSealer(k)
			if err != nil {
				return err
			}
			key, err = (&meta.Keys{Pool: pool, Sealer: sealer}).Create(ctx, "fencebench capacity", []meta.Grant{{Bucket: "*", Permission: meta.PermAdmin}})
			return err
		},
	})
	if err != nil {
		return run, err
	}
	defer c.Stop()
	db, err := pgx.Connect(ctx, c.Primary.URL("fencegate"))
	if err != nil {
		return run, err
	}
	defer db.Close(context.Background())
	xids := func() int64 {
		var x int64
		_ = db.QueryRow(context.Background(), `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&x)
		return x
	}
	t := target{name: "cluster", Endpoint: c.Endpoint(key.ID, key.Secret)}
	cl := newS3c(t)
	if err := cl.createBucket(ctx); err != nil {
		return run, err
	}

	// Warm every gateway's connections and code paths (not recorded), then
	// the background with no load.
	rate := func(op string) float64 { return map[string]float64{opPUT: cfg.PutPerS, opGET: cfg.GetPerS}[op] }
	_, keys := openLoop(ctx, cl, opPUT, cfg.PutPerS, 3*time.Second, cfg.MaxInFlight, payload, "warm", nil)
	idle := time.Duration(cfg.IdleSecs * float64(time.Second))
	cpu0, x0 := clusterCPU(c), xids()
	sleepCtx(ctx, idle)
	run.IdleCPUPerS = clusterCPU(c).sub(cpu0).scale(1000 / idle.Seconds())
	run.IdleTxnPerS = float64(xids()-x0) / idle.Seconds()

	if len(keys) == 0 {
		return run, fmt.Errorf("the warm-up wrote no object")
	}
	phase := time.Duration(cfg.PhaseSecs * float64(time.Second))
	for _, op := range []string{opPUT, opGET} {
		cpu0, x0 := clusterCPU(c), xids()
		r, written := openLoop(ctx, cl, op, rate(op), phase, cfg.MaxInFlight, payload, "cap", keys)
		if ctx.Err() != nil {
			return run, ctx.Err()
		}
		p := r.phase(op, rate(op))
		if p.Ops > 0 {
			p.CPUMsPerOp = clusterCPU(c).sub(cpu0).scale(1000 / float64(p.Ops))
			p.WriteTxnPerOp = float64(xids()-x0) / float64(p.Ops)
		}
		run.Phases = append(run.Phases, p)
		if op == opPUT && len(written) > 0 {
			keys = written // GETs read what the PUT phase wrote
		}
		fmt.Fprintf(os.Stderr, "  %d gw %s: %.1f/s of %.0f offered, p50 %.1f ms, p99 %.1f ms, %d late, %d errors\n",
			n, op, p.AchievedPerS, p.OfferedPerS, p.P50Ms, p.P99Ms, p.Late, p.Errors)
	}

	// The hot key: HotClients writers of one key, closed loop.
	cpu0, x0 = clusterCPU(c), xids()
	sm := runCell(ctx, t, procGroups{xids: func() int64 { return 0 }}, cell{opPUTHotCluster, cfg.SizeBytes, cfg.HotClients},
		time.Duration(cfg.HotSecs*float64(time.Second)), payload)
	hot := capacityPhase{Op: opPUTHotCluster, AchievedPerS: sm.opsPerS(), Ops: sm.ops, Errors: sm.errors, Seconds: sm.elapsed.Seconds(),
		P50Ms: ms(sm.p50.Seconds()), P99Ms: ms(sm.p99.Seconds())}
	if sm.firstErr != nil {
		hot.FirstError = sm.firstErr.Error()
	}
	if sm.ops > 0 {
		hot.CPUMsPerOp = clusterCPU(c).sub(cpu0).scale(1000 / float64(sm.ops))
		hot.WriteTxnPerOp = float64(xids()-x0) / float64(sm.ops)
	}
	run.Phases = append(run.Phases, hot)
	fmt.Fprintf(os.Stderr, "  %d gw one key, %d writers: %.1f PUT/s, p50 %.1f ms, p99 %.1f ms, %d errors\n",
		n, cfg.HotClients, hot.AchievedPerS, hot.P50Ms, hot.P99Ms, hot.Errors)
	run.LoadAfter = loadAvg()
	return run, nil
}

// clusterCPU reads every part's CPU seconds in one pass over /proc: a part
// is its process group and that group's direct children (stack.GroupCPU's
// rule: PostgreSQL's backends leave the postmaster's group).
func clusterCPU(c *stack.Cluster) roleCPU {
	procs := stack.Processes()
	sum := func(pgids ...int) float64 {
		var t int64
		for _, p := range procs {
			if slices.ContainsFunc(pgids, func(g int) bool { return g != 0 && (p.Pgrp == g || p.PPid == g) }) {
				t += p.User + p.System
			}
		}
		return float64(t) / stack.ClockTick
	}
	var gws, vols []int
	for _, g := range c.Gateways {
		gws = append(gws, g.Pid())
	}
	for _, v := range c.Store.Volumes {
		vols = append(vols, v.Pid())
	}
	return roleCPU{
		PGPrimary: sum(c.Primary.Pid()), PGStandby: sum(c.Standby.Pid()),
		Gateways: sum(gws...), HAProxy: sum(c.Balancer.Pid()),
		Master: sum(c.Store.Master.Pid()), Volumes: sum(vols...), Filer: sum(c.Store.Filer.Pid()), S3: sum(c.Store.S3.Pid()),
		Client: selfCPU(),
	}
}

// loadResult is what an open-loop load did.
type loadResult struct {
	ops, errors, late int
	elapsed           time.Duration
	lats              []time.Duration
	firstErr          error
}

func (r loadResult) phase(op string, offered float64) capacityPhase {
	p := capacityPhase{Op: op, OfferedPerS: offered, Ops: r.ops, Errors: r.errors, Late: r.late, Seconds: r.elapsed.Seconds()}
	if r.elapsed > 0 {
		p.AchievedPerS = float64(r.ops) / r.elapsed.Seconds()
	}
	slices.Sort(r.lats)
	if len(r.lats) > 0 {
		p.P50Ms = ms(r.lats[(len(r.lats)-1)*50/100].Seconds())
		p.P99Ms = ms(r.lats[(len(r.lats)-1)*99/100].Seconds())
	}
	if r.firstErr != nil {
		p.FirstError = r.firstErr.Error()
	}
	return p
}

// openLoop starts one op every 1/rate seconds for dur whatever the earlier
// ones are doing (an open loop: a slow server does not slow the arrivals),
// each timed from its scheduled start, so queueing shows in the latency. An
// arrival finding maxInFlight requests open is dropped and counted late.
// A PUT writes prefix/i, a key of its own (the keys written are returned);
// a GET reads one of keys, spread by getKey.
func openLoop(ctx context.Context, cl *s3c, op string, rate float64, dur time.Duration, maxInFlight int, payload []byte, prefix string, keys []string) (loadResult, []string) {
	var (
		mu      sync.Mutex
		r       loadResult
		written []string
		wg      sync.WaitGroup
		open    atomic.Int64
		bufs    = sync.Pool{New: func() any { return make([]byte, 256<<10) }}
		every   = time.Duration(float64(time.Second) / rate)
	)
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * every)
		if at.Sub(start) >= dur || ctx.Err() != nil {
			break
		}
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		if open.Load() >= int64(maxInFlight) {
			mu.Lock()
			r.late++
			mu.Unlock()
			continue
		}
		open.Add(1)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer open.Add(-1)
			buf := bufs.Get().([]byte)
			defer bufs.Put(buf)
			var err error
			key := fmt.Sprintf("%s/%d", prefix, i)
			if op == opPUT {
				err = cl.put(ctx, key, payload, buf)
			} else {
				key = keys[getKey(i, len(keys))]
				err = cl.get(ctx, key, int64(len(payload)), buf)
			}
			lat := time.Since(at)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.errors++
				if r.firstErr == nil {
					r.firstErr = err
				}
				return
			}
			r.ops++
			r.lats = append(r.lats, lat)
			if op == opPUT {
				written = append(written, key)
			}
		}(i)
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	return r, written
}

// getKey spreads GET i over n keys: a stride of a prime larger than any n
// here, so consecutive GETs read different keys and every key is read.
func getKey(i, n int) int {
	if n <= 0 {
		return 0
	}
	return (i * 7919) % n
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// loadAvg is /proc/loadavg's three load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
