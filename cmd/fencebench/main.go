// Command fencebench measures fencegate against the store it fronts and against
// versitygw's s3 proxy in front of the same store, side by side in one run.
//
// It starts its own stack (durable PostgreSQL, SeaweedFS `weed mini`, versitygw
// v1.8.0 `s3 --disable-data-integrity-check`, and `fencegate serve --migrate`
// built from this checkout), then runs every workload cell against the three
// targets, round by round (the target order rotates each round), and reports
// medians with min and max. The small cells that issue 15 judges also run
// through a bare TCP relay (relay.go): what one more hop costs here, whatever
// the gateway. Results go to docs/bench-results.json,
// docs/PERFORMANCE.md and docs/throughput.png (and .svg). `make bench` runs it;
// `make bench-quick` adds -quick, whose noisy results go to bin/bench-quick/
// unless -out or -docs name a place. -capacity (`make bench-capacity`,
// capacity.go) measures the cluster stack's cost per operation instead.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	quick      bool
	out, docs  string
	from       string
	rounds     int
	duration   time.Duration
	streamSize int64
	logLevel   string
	fgBin      string
	perfDir    string
	cells      string
	statements bool
	plotOnly   bool
	capacity   bool
	capOut     string
	capDoc     string
	capCfg     capacityConfig
	capGWs     string
}

// quickDir is where a -quick run writes unless told otherwise: its short cells
// are too noisy to replace the committed full run's results and docs.
const quickDir = "bin/bench-quick"

// quickOutputs sends a quick run's files to quickDir, except those whose flag
// (in set, the flags given on the command line) names a place.
func quickOutputs(o *options, set map[string]bool) {
	if !o.quick {
		return
	}
	if !set["out"] {
		o.out = filepath.Join(quickDir, "bench-results.json")
	}
	if !set["docs"] {
		o.docs = quickDir
	}
}

func main() {
	if store := os.Getenv(relayEnv); store != "" {
		if err := relayMain(store); err != nil {
			fmt.Fprintln(os.Stderr, "fencebench relay:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.BoolVar(&o.quick, "quick", false, "short cells (0.3 s), large objects at 1 client only, and a 256 MiB streaming check instead of 2 GiB: under 2 minutes")
	flag.StringVar(&o.out, "out", "docs/bench-results.json", "results file (JSON; -quick: "+quickDir+"/bench-results.json)")
	flag.StringVar(&o.docs, "docs", "docs", "folder for PERFORMANCE.md and throughput.png/.svg (empty: skip; -quick: "+quickDir+")")
	flag.StringVar(&o.from, "from", "", "do not measure: regenerate the docs and tables from this results file")
	flag.BoolVar(&o.plotOnly, "plot-only", false, "with -from: redraw only throughput.png and .svg in -docs (PERFORMANCE.md keeps the run's date and machine)")
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds (every figure is their median)")
	flag.StringVar(&o.logLevel, "log-level", "info", "fencegate's log level (its default, info, logs one line per request)")
	flag.StringVar(&o.fgBin, "fencegate", "", "use this fencegate binary instead of building ./cmd/fencegate from the checkout")
	flag.StringVar(&o.perfDir, "perf", "", "instead of the benchmark: record perf(1) CPU profiles of fencegate under a few cells into this folder")
	flag.StringVar(&o.cells, "cells", "", "measure only the cells whose name matches this regular expression (e.g. 'GET 64 MiB'), print their tables and write no files (no streaming check either)")
	flag.BoolVar(&o.statements, "pg-statements", false, "with -cells: PostgreSQL tracks every statement (pg_stat_statements), and each fencegate run of a cell prints them per operation, nested ones included")
	flag.BoolVar(&o.capacity, "capacity", false, "instead of the benchmark: the cluster stack with 1, 2 and 3 gateways under the same offered load, and each part's CPU per operation (docs/SCALING.md); with -from, regenerate its section from a capacity results file")
	flag.StringVar(&o.capOut, "capacity-out", "docs/capacity-results.json", "with -capacity: results file (JSON; empty: none)")
	flag.StringVar(&o.capDoc, "capacity-doc", "docs/SCALING.md", "with -capacity: the document whose generated section it rewrites (empty: none)")
	flag.StringVar(&o.capGWs, "capacity-gateways", "1,2,3", "with -capacity: the gateway counts, one cluster stack each")
	flag.Float64Var(&o.capCfg.PutPerS, "capacity-put-rate", 120, "with -capacity: offered PUT/s (open loop)")
	flag.Float64Var(&o.capCfg.GetPerS, "capacity-get-rate", 300, "with -capacity: offered GET/s (open loop)")
	flag.DurationVar(&o.duration, "duration", 0, "time per cell and target (default 2.5s, -quick 0.3s; -capacity: per load phase, default 20s)")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	quickOutputs(&o, set)
	if o.statements && o.cells == "" {
		// Tracking costs PostgreSQL CPU: such a run must not become the
		// committed benchmark's results.
		fmt.Fprintln(os.Stderr, "fencebench: -pg-statements needs -cells (its runs write no results)")
		os.Exit(2)
	}
	if o.capacity {
		if o.duration == 0 {
			o.duration = 20 * time.Second
		}
		for _, f := range strings.Split(o.capGWs, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "fencebench: -capacity-gateways: %q is not a gateway count\n", f)
				os.Exit(2)
			}
			o.capCfg.Gateways = append(o.capCfg.Gateways, n)
		}
		o.capCfg.SizeBytes = 64 << 10
		o.capCfg.PhaseSecs = o.duration.Seconds()
		o.capCfg.IdleSecs = 5
		o.capCfg.HotClients = 8
		o.capCfg.HotSecs = 10
		o.capCfg.MaxInFlight = 256
		o.capCfg.LogLevel = o.logLevel
	}
	if o.duration == 0 {
		o.duration = 2500 * time.Millisecond
		if o.quick {
			o.duration = 300 * time.Millisecond
		}
	}
	o.streamSize = 2 << 30
	if o.quick {
		o.streamSize = 256 << 20
	}
	// aws-sdk-go-v2 config loading in children (versitygw) fails while it is set.
	os.Unsetenv("AWS_CA_BUNDLE")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case o.capacity && o.from != "":
		err = capacityFromFile(o.from, o.capDoc)
	case o.capacity:
		err = runCapacity(ctx, o.capCfg, o.fgBin, o.capOut, o.capDoc)
	case o.from != "":
		err = fromFile(o)
	default:
		err = run(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencebench:", err)
		stop()
		os.Exit(1)
	}
}

func fromFile(o options) error {
	b, err := os.ReadFile(o.from)
	if err != nil {
		return err
	}
	var recs []Record
	if err := json.Unmarshal(b, &recs); err != nil {
		return err
	}
	if o.plotOnly {
		if o.docs == "" {
			return nil
		}
		return writePlots(filepath.Join(o.docs, "throughput.png"), recs)
	}
	m := machineInfo()
	printTables(os.Stdout, recs)
	return writeDocs(o, m, recs)
}

// workload is every cell of a round, in order. Objects of 64 MiB and up run at
// 1 and 4 clients (multipart: 1 and 2), not 32: at the store's ~70-150 MiB/s
// for writes here, every extra client adds seconds to each of the nine runs of
// a cell. -quick keeps those at 1 client only.
func workload(quick bool) []cell {
	var cells []cell
	for _, size := range []int64{4 << 10, 64 << 10, 1 << 20, 64 << 20} {
		concs := []int{1, 32}
		if size >= 64<<20 {
			concs = []int{1, 4}
			if quick {
				concs = []int{1}
			}
		}
		for _, op := range []string{opPUT, opGET} {
			for _, c := range concs {
				cells = append(cells, cell{op, size, c})
			}
		}
		if size == 64<<10 {
			// The hot key: 32 clients PUT 64 KiB to one key; then to 4 keys
			// (client i always to key i%4), eight writers queued on each.
			// They run beside the 64 KiB PUT at one client whose latency
			// the hot key is judged against, before the large cells: after
			// hundreds of MiB written the store's own PUTs slow for a while.
			cells = append(cells, cell{opPUTHot, 64 << 10, 32}, cell{opPUTHot4, 64 << 10, 32})
			// Upload reservations (reserve.go), beside the plain PUT 64 KiB c=32.
			cells = append(cells, reserveCells...)
			// The small PUT with its events delivered to a webhook (notifybench.go).
			cells = append(cells, notifyCell)
		}
	}
	cells = append(cells, cell{opMultipart, partSize * partCount, 1})
	if !quick {
		cells = append(cells, cell{opMultipart, partSize * partCount, 2})
	}
	return cells
}

func run(ctx context.Context, o options) (err error) {
	began := time.Now()
	m := machineInfo()
	fmt.Fprintf(os.Stderr, "fencebench: %s, %d CPUs (%s); %d rounds, %s per cell\n", modeName(o), m.nproc, m.model, o.rounds, o.duration)
	s := &benchStack{statements: o.statements}
	defer s.stop()
	defer func() {
		if err != nil && s.fg != nil {
			fmt.Fprintf(os.Stderr, "fencegate log (tail):\n%s\n", s.fg.LogTail())
		}
	}()
	fmt.Fprintln(os.Stderr, "starting PostgreSQL (durable), SeaweedFS, versitygw s3 proxy and fencegate ...")
	if err := startStack(ctx, s, o.fgBin, o.logLevel); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "stack up in %s: direct %s (weed pid %d), fencegate %s (pid %d), versitygw %s (pid %d), relay %s (pid %d)\n",
		time.Since(began).Round(100*time.Millisecond), s.targets[0].URL, s.targets[0].pgid, s.targets[1].URL, s.targets[1].pgid, s.targets[2].URL, s.targets[2].pgid, s.targets[3].URL, s.targets[3].pgid)

	payload := make([]byte, partSize)
	_, _ = rand.Read(payload)
	cells := workload(o.quick)
	if o.cells != "" {
		re, err := regexp.Compile(o.cells)
		if err != nil {
			return fmt.Errorf("-cells: %w", err)
		}
		cells = slices.DeleteFunc(cells, func(c cell) bool { return !re.MatchString(c.String()) })
		if len(cells) == 0 {
			return fmt.Errorf("-cells %q matches no cell", o.cells)
		}
	}
	if err := seed(ctx, s.targets[0], cells, payload); err != nil {
		return fmt.Errorf("seeding: %w", err)
	}
	if slices.Contains(cells, notifyCell) {
		if err := setUpNotify(ctx, s); err != nil {
			return fmt.Errorf("the notification cell: %w", err)
		}
		defer stopNotify()
	}

	if o.perfDir != "" {
		return profile(ctx, s, o.perfDir, max(o.duration, 5*time.Second), payload)
	}

	// Memory first, while fencegate's peak RSS is still its idle one.
	var streams []streamResult
	if o.cells == "" {
		fmt.Fprintf(os.Stderr, "streaming %s PUT and GET through fencegate for its peak RSS ...\n", sizeLabel(o.streamSize))
		if streams, err = streamRSS(ctx, s.targets[1], s.fg.Pid(), o.streamSize, payload); err != nil {
			return fmt.Errorf("streaming: %w", err)
		}
		for _, r := range streams {
			fmt.Fprintf(os.Stderr, "  %s %s: %.1f s, RSS idle %.1f MiB, peak %.1f MiB\n", r.op, sizeLabel(r.size), r.secs, kib(r.idleKiB), kib(r.hwmKiB))
		}
	}

	// Warm every target's connections and code paths (not recorded).
	for _, t := range s.targets {
		for _, c := range []cell{{opPUT, 64 << 10, 32}, {opGET, 64 << 10, 32}, reserveCell} {
			if !t.runs(c) || isReserve(c) && !slices.Contains(cells, c) {
				continue
			}
			_ = runCell(ctx, t, s.groups(), c, 300*time.Millisecond, payload)
		}
	}
	// The two-transaction floor beside the PUT cells at one client: a scratch
	// database on the same PostgreSQL, warmed the same way.
	if needFloor(cells) {
		if s.floorDB, err = openFloor(ctx, s.pg); err != nil {
			return fmt.Errorf("the two-transaction floor: %w", err)
		}
		_ = runFloor(ctx, s.floorDB, s.groups(), 300*time.Millisecond)
	}

	direct := s.targets[slices.IndexFunc(s.targets, func(t target) bool { return t.name == "direct" })]
	samples := map[string][]sample{} // key: target + cell
	busy0, own0, wall0 := busyCPU(), s.ownCPU(), time.Now()
	errCount := 0
	for r := 0; r < o.rounds; r++ {
		order := rotate(s.targets, r)
		if s.floorDB != nil {
			sm := runFloor(ctx, s.floorDB, s.groups(), o.duration)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if sm.errors > 0 {
				errCount += sm.errors
				fmt.Fprintf(os.Stderr, "  two-transaction floor: %d errors, first: %v\n", sm.errors, sm.firstErr)
			}
			samples[floorTarget] = append(samples[floorTarget], sm)
			fmt.Fprintf(os.Stderr, "[round %d/%d] two durable PostgreSQL transactions at 1 client: p50 %.2f ms, p99 %.2f ms (%.0f pairs/s)\n",
				r+1, o.rounds, ms(sm.p50.Seconds()), ms(sm.p99.Seconds()), sm.opsPerS())
			line := fmt.Sprintf("[round %d/%d] the store's PUT as fencegate fences it, p50:", r+1, o.rounds)
			for _, c := range fencedCells(cells) {
				fs := runFencedPUT(ctx, direct, s.groups(), c, sm.p50, o.duration, payload)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if fs.errors > 0 {
					errCount += fs.errors
					fmt.Fprintf(os.Stderr, "  %s: %d errors, first: %v\n", c, fs.errors, fs.firstErr)
				}
				samples[storeTarget+"|"+c.String()] = append(samples[storeTarget+"|"+c.String()], fs)
				line += fmt.Sprintf("  %s %.2f ms", c, ms(fs.p50.Seconds()))
			}
			fmt.Fprintln(os.Stderr, line)
		}
		for i, c := range cells {
			line := fmt.Sprintf("[round %d/%d, %2d/%d] %-22s", r+1, o.rounds, i+1, len(cells), c)
			for _, t := range order {
				if !t.runs(c) {
					continue
				}
				track := o.statements && t.name == "fencegate"
				if track {
					if err := s.resetStatements(ctx); err != nil {
						return err
					}
				}
				sm := runCell(ctx, t, s.groups(), c, o.duration, payload)
				if track {
					if err := s.printStatements(ctx, os.Stderr, fmt.Sprintf("round %d, %s", r+1, c), sm.ops); err != nil {
						return err
					}
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if sm.errors > 0 {
					errCount += sm.errors
					fmt.Fprintf(os.Stderr, "  %s %s: %d errors, first: %v\n", t.name, c, sm.errors, sm.firstErr)
				}
				samples[t.name+"|"+c.String()] = append(samples[t.name+"|"+c.String()], sm)
				line += fmt.Sprintf("  %s %7.1f MiB/s", t.name, sm.mibPerS())
			}
			fmt.Fprintln(os.Stderr, line)
		}
		s.vacuum(ctx)
		runtime.GC()
	}

	other := max(0, (busyCPU()-busy0)-(s.ownCPU()-own0))
	m.other = fmt.Sprintf("CPU used outside the benchmark's own processes during the rounds (other work on the machine, kernel softirq time): %.0f CPU-seconds in %.0f s on %d CPUs, %.1f%% of the machine.",
		other, time.Since(wall0).Seconds(), m.nproc, 100*other/time.Since(wall0).Seconds()/float64(m.nproc))
	fmt.Fprintln(os.Stderr, m.other)

	var recs []Record
	if ss := samples[floorTarget]; len(ss) > 0 {
		fl := aggregate(floorTarget, floorCell, ss)
		fl.CPUProcess = "PostgreSQL"
		recs = append(recs, fl)
	}
	for _, c := range fencedCells(cells) {
		if ss := samples[storeTarget+"|"+c.String()]; len(ss) > 0 {
			st := aggregate(storeTarget, c, ss)
			st.CPUProcess = "weed (SeaweedFS)"
			recs = append(recs, st)
		}
	}
	for _, c := range cells {
		for _, t := range s.targets {
			if !t.runs(c) {
				continue
			}
			recs = append(recs, aggregate(t.name, c, samples[t.name+"|"+c.String()]))
		}
	}
	for _, r := range streams {
		recs = append(recs, streamRecord(r))
	}
	if o.cells != "" {
		printTables(os.Stdout, recs)
		return nil
	}
	b, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(o.out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	printTables(os.Stdout, recs)
	if err := writeDocs(o, m, recs); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s", o.out)
	if o.docs != "" {
		fmt.Fprintf(os.Stderr, ", %s, %s (and .svg)", filepath.Join(o.docs, "PERFORMANCE.md"), filepath.Join(o.docs, "throughput.png"))
	}
	fmt.Fprintf(os.Stderr, " (%s in all)\n", time.Since(began).Round(time.Second))
	if errCount > 0 {
		return fmt.Errorf("%d requests failed (see above); their operations are not counted", errCount)
	}
	return nil
}

// rotate starts round r's target order at target r mod their number, so no target always
// runs right after the same one.
func rotate(ts []target, r int) []target {
	out := make([]target, 0, len(ts))
	for i := range ts {
		out = append(out, ts[(i+r)%len(ts)])
	}
	return out
}

func modeName(o options) string {
	if o.quick {
		return "quick mode"
	}
	return "full mode"
}

func kib(n int64) float64 { return float64(n) / 1024 }
