package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// tableTargets are the targets the tables list, in order (the relay has
// cells of its own only).
var tableTargets = []string{"direct", "fencegate", "versitygw", relayTarget}

// Record is one line of docs/bench-results.json: a (target, op, size, concurrency)
// cell summarised over its rounds (median, min, max), a streaming-memory run,
// or the two-transaction floor (target postgresql, op 2TXN: floor.go).
type Record struct {
	Target      string  `json:"target"` // direct, fencegate, versitygw, relay (postgresql: the floor)
	Op          string  `json:"op"`     // GET, PUT, PUT1KEY, PUT4KEYS, MULTIPART (2TXN: the floor)
	SizeBytes   int64   `json:"size_bytes"`
	Concurrency int     `json:"concurrency"`
	OpsPerS     float64 `json:"ops_per_s"`
	MiBPerS     float64 `json:"mib_per_s"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`

	OpsPerSMin float64 `json:"ops_per_s_min"`
	OpsPerSMax float64 `json:"ops_per_s_max"`
	MiBPerSMin float64 `json:"mib_per_s_min"`
	MiBPerSMax float64 `json:"mib_per_s_max"`
	P50MsMin   float64 `json:"p50_ms_min"`
	P50MsMax   float64 `json:"p50_ms_max"`
	P99MsMin   float64 `json:"p99_ms_min"`
	P99MsMax   float64 `json:"p99_ms_max"`
	// CPU seconds per operation of the process behind the target: fencegate,
	// versitygw, or (direct) SeaweedFS's weed. Median over rounds.
	CPUSPerOp    float64 `json:"cpu_s_per_op"`
	CPUSPerOpMin float64 `json:"cpu_s_per_op_min"`
	CPUSPerOpMax float64 `json:"cpu_s_per_op_max"`
	CPUProcess   string  `json:"cpu_process"`
	// The store's (weed), PostgreSQL's and this load generator's CPU per operation.
	StoreCPUSPerOp float64 `json:"store_cpu_s_per_op"`
	DBCPUSPerOp    float64 `json:"db_cpu_s_per_op"` // PostgreSQL, all its processes
	// PostgreSQL write transactions (those that took a transaction id) per
	// operation, all rounds together.
	DBWriteTxnsPerOp float64 `json:"db_write_txns_per_op"`
	ClientCPUSPerOp  float64 `json:"client_cpu_s_per_op"`

	Rounds        int       `json:"rounds"`
	CellSeconds   float64   `json:"cell_seconds"`
	MiBPerSRounds []float64 `json:"mib_per_s_rounds"` // round by round, for paired ratios
	OpsTotal      int       `json:"ops_total"`
	Errors        int       `json:"errors"`

	// Round by round too (absent from results files written before they were
	// recorded): latencies, and the gateway's and PostgreSQL's CPU seconds per
	// operation (rounds without a completed operation left out).
	P50MsRounds       []float64 `json:"p50_ms_rounds,omitempty"`
	P99MsRounds       []float64 `json:"p99_ms_rounds,omitempty"`
	CPUSPerOpRounds   []float64 `json:"cpu_s_per_op_rounds,omitempty"`
	DBCPUSPerOpRounds []float64 `json:"db_cpu_s_per_op_rounds,omitempty"`

	// Streaming-memory records only (op PUT or GET of 2 GiB, or 256 MiB in
	// -quick). VmHWM is the peak since the process started, so the GET's peak
	// covers the PUT before it.
	RSSIdleMiB   *float64 `json:"rss_idle_mib,omitempty"`
	RSSPeakMiB   *float64 `json:"rss_peak_mib,omitempty"`
	RSSGrowthMiB *float64 `json:"rss_growth_mib,omitempty"`

	// The notification cell only (notifybench.go).
	Notify *NotifyFigures `json:"notify,omitempty"`
}

// stats is a median with its min and max.
type stats struct{ med, min, max float64 }

func summarize(v []float64) stats {
	if len(v) == 0 {
		return stats{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stats{med, s[0], s[len(s)-1]}
}

func (s stats) String() string {
	return fmt.Sprintf("%s [%s-%s]", num(s.med), num(s.min), num(s.max))
}

// num prints with about three significant digits.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1 || v <= -1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func aggregate(targetName string, c cell, ss []sample) Record {
	r := Record{Target: targetName, Op: c.op, SizeBytes: c.size, Concurrency: c.conc, Rounds: len(ss)}
	var ops, mib, p50, p99, cpu, store, db, client []float64
	var writes int64
	for _, s := range ss {
		r.OpsTotal += s.ops
		r.Errors += s.errors
		writes += s.dbWrites
		r.CellSeconds += s.elapsed.Seconds() / float64(len(ss))
		ops = append(ops, s.opsPerS())
		mib = append(mib, s.mibPerS())
		r.MiBPerSRounds = append(r.MiBPerSRounds, round3(s.mibPerS()))
		p50 = append(p50, ms(s.p50.Seconds()))
		p99 = append(p99, ms(s.p99.Seconds()))
		r.P50MsRounds = append(r.P50MsRounds, round3(ms(s.p50.Seconds())))
		r.P99MsRounds = append(r.P99MsRounds, round3(ms(s.p99.Seconds())))
		if s.ops > 0 {
			cpu = append(cpu, s.cpu/float64(s.ops))
			store = append(store, s.storeCPU/float64(s.ops))
			db = append(db, s.dbCPU/float64(s.ops))
			client = append(client, s.client/float64(s.ops))
			r.CPUSPerOpRounds = append(r.CPUSPerOpRounds, round6(s.cpu/float64(s.ops)))
			r.DBCPUSPerOpRounds = append(r.DBCPUSPerOpRounds, round6(s.dbCPU/float64(s.ops)))
		}
	}
	o, m, a, b, cs := summarize(ops), summarize(mib), summarize(p50), summarize(p99), summarize(cpu)
	r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax = round3(o.med), round3(o.min), round3(o.max)
	r.MiBPerS, r.MiBPerSMin, r.MiBPerSMax = round3(m.med), round3(m.min), round3(m.max)
	r.P50Ms, r.P50MsMin, r.P50MsMax = round3(a.med), round3(a.min), round3(a.max)
	r.P99Ms, r.P99MsMin, r.P99MsMax = round3(b.med), round3(b.min), round3(b.max)
	r.CPUSPerOp, r.CPUSPerOpMin, r.CPUSPerOpMax = round6(cs.med), round6(cs.min), round6(cs.max)
	r.StoreCPUSPerOp, r.DBCPUSPerOp, r.ClientCPUSPerOp = round6(summarize(store).med), round6(summarize(db).med), round6(summarize(client).med)
	r.CellSeconds = round3(r.CellSeconds)
	r.Notify = aggregateNotify(ss)
	if r.OpsTotal > 0 {
		r.DBWriteTxnsPerOp = round3(float64(writes) / float64(r.OpsTotal))
	}
	r.CPUProcess = map[string]string{"direct": "weed (SeaweedFS)", "fencegate": "fencegate", "versitygw": "versitygw", relayTarget: "fencebench's TCP relay"}[targetName]
	return r
}

func streamRecord(s streamResult) Record {
	idle, peak := round3(kib(s.idleKiB)), round3(kib(s.hwmKiB))
	growth := round3(peak - idle)
	secs := round3(s.secs)
	return Record{
		Target: "fencegate", Op: s.op, SizeBytes: s.size, Concurrency: 1,
		OpsPerS: round3(1 / s.secs), MiBPerS: round3(float64(s.size) / (1 << 20) / s.secs),
		P50Ms: secs * 1000, P99Ms: secs * 1000, CPUSPerOp: round6(s.cpuSecs), CPUProcess: "fencegate",
		Rounds: 1, OpsTotal: 1, CellSeconds: secs,
		RSSIdleMiB: &idle, RSSPeakMiB: &peak, RSSGrowthMiB: &growth,
	}
}

func ms(sec float64) float64   { return sec * 1000 }
func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }
func round6(v float64) float64 { return float64(int64(v*1e6+0.5)) / 1e6 }
func isStream(r Record) bool   { return r.RSSPeakMiB != nil }
func cellOf(r Record) cell     { return cell{r.Op, r.SizeBytes, r.Concurrency} }
func findRec(recs []Record, t string, c cell) *Record {
	for i := range recs {
		if !isStream(recs[i]) && recs[i].Target == t && cellOf(recs[i]) == c {
			return &recs[i]
		}
	}
	return nil
}

// cells lists the measured cells of recs in their order.
func cells(recs []Record) []cell {
	var out []cell
	for _, r := range recs {
		if !isStream(r) && !isFloor(r) && !slices.Contains(out, cellOf(r)) {
			out = append(out, cellOf(r))
		}
	}
	return out
}

// ratio pairs the rounds of two targets (round i of one with round i of the
// other, measured minutes apart) and summarises num/den of their throughputs.
func ratio(recs []Record, numT, denT string, c cell) (stats, bool) {
	a, b := findRec(recs, numT, c), findRec(recs, denT, c)
	if a == nil || b == nil || len(a.MiBPerSRounds) != len(b.MiBPerSRounds) || len(a.MiBPerSRounds) == 0 {
		return stats{}, false
	}
	var v []float64
	for i := range a.MiBPerSRounds {
		if b.MiBPerSRounds[i] == 0 {
			return stats{}, false
		}
		v = append(v, a.MiBPerSRounds[i]/b.MiBPerSRounds[i])
	}
	return summarize(v), true
}

func sizeLabel(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func cellLabel(c cell) string {
	switch c.op {
	case opMultipart:
		return fmt.Sprintf("multipart %s (4x64 MiB) c=%d", sizeLabel(c.size), c.conc)
	case opPUTHot:
		return fmt.Sprintf("%s (one key)", c)
	case opPUTHot4:
		return fmt.Sprintf("%s (%d keys, client i: key i%%%d)", c, hotKeys, hotKeys)
	case opReserve:
		return fmt.Sprintf("reserve + PUT %s c=%d", sizeLabel(c.size), c.conc)
	case opReserveComplete:
		return fmt.Sprintf("reserve + PUT %s + complete c=%d", sizeLabel(c.size), c.conc)
	case opPUTNotify:
		return fmt.Sprintf("PUT %s c=%d, events to a webhook", sizeLabel(c.size), c.conc)
	}
	return fmt.Sprintf("%s %s c=%d", c.op, sizeLabel(c.size), c.conc)
}

// printTables writes the per-target figures, the ratios and the target checks.
func printTables(w io.Writer, recs []Record) {
	fmt.Fprintln(w, "\nThroughput and latency: median [min-max] over interleaved rounds")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "cell\ttarget\tops/s\tMiB/s\tp50 ms\tp99 ms\tgateway CPU ms/op\tstore CPU ms/op\tPostgreSQL CPU ms/op\tPostgreSQL write txns/op\terrors")
	for _, c := range cells(recs) {
		for _, t := range tableTargets {
			r := findRec(recs, t, c)
			if r == nil {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", cellLabel(c), t,
				stats{r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax}, stats{r.MiBPerS, r.MiBPerSMin, r.MiBPerSMax},
				stats{r.P50Ms, r.P50MsMin, r.P50MsMax}, stats{r.P99Ms, r.P99MsMin, r.P99MsMax},
				stats{r.CPUSPerOp * 1000, r.CPUSPerOpMin * 1000, r.CPUSPerOpMax * 1000}, num(r.StoreCPUSPerOp*1000), dbCPUms(*r), num(r.DBWriteTxnsPerOp), r.Errors)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "(gateway CPU for direct is SeaweedFS's weed process itself, for relay fencebench's bare TCP relay; PostgreSQL write txns/op counts transaction ids taken during the cell, over all its rounds)")
	if line := notifySummary(recs); line != "" {
		fmt.Fprintln(w, line)
	}

	if rows := hopRows(recs); len(rows) > 0 {
		fmt.Fprintln(w, "\nWhat any gateway pays here: a bare TCP relay in front of the store (bytes copied both ways, no HTTP), and one writer at a time on the hot key; median [min-max]")
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(hopHeader, "\t"))
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
	}

	fmt.Fprintln(w, "\nSmall PUT latency at 1 client against the two-transaction floor (two durable PostgreSQL write transactions at 1 client + the store's own PUT p50): median [min-max]")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(floorHeader, "\t"))
	for _, row := range floorRows(recs) {
		fmt.Fprintln(tw, strings.Join(row.cells(), "\t"))
	}
	tw.Flush()
	if tx := findFloor(recs); tx != nil {
		fmt.Fprintf(w, "(the two transactions: %s pairs/s, PostgreSQL CPU %s ms and %s write txns per pair)\n", num(tx.OpsPerS), num(tx.DBCPUSPerOp*1000), num(tx.DBWriteTxnsPerOp))
	}

	if rows := reserveRows(recs); len(rows) > 0 {
		fmt.Fprintln(w, "\n"+reserveIntro)
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(reserveHeader, "\t"))
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
	}

	fmt.Fprintln(w, "\nRatios of MiB/s, round-paired: median [min-max]")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "cell\tfencegate/direct\tfencegate/versitygw")
	for _, c := range cells(recs) {
		d, okD := ratio(recs, "fencegate", "direct", c)
		v, okV := ratio(recs, "fencegate", "versitygw", c)
		fmt.Fprintf(tw, "%s\t%s\t%s\n", cellLabel(c), orDash(d, okD), orDash(v, okV))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nPerformance targets: docs/DESIGN.md's, issue 15's and issue 35's (judged on the median over rounds; [min-max])")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "from\ttarget\tworst cell\tmeasured\theld")
	for _, ch := range checks(recs) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ch.source, ch.name, ch.worst, ch.measured, heldWord(ch))
	}
	tw.Flush()
	for _, r := range recs {
		if isStream(r) {
			fmt.Fprintf(w, "streaming %s %s through fencegate: %s MiB/s, RSS idle %s MiB, peak %s MiB (+%s MiB)\n",
				r.Op, sizeLabel(r.SizeBytes), num(r.MiBPerS), num(*r.RSSIdleMiB), num(*r.RSSPeakMiB), num(*r.RSSGrowthMiB))
		}
	}
}

func orDash(s stats, ok bool) string {
	if !ok {
		return "-"
	}
	return s.String()
}

func heldWord(c check) string {
	switch {
	case !c.known:
		return "not measured"
	case c.held:
		return "held"
	}
	return "NOT held"
}

// check is one performance target (docs/DESIGN.md's or issue 15's), judged
// over its cells by their worst median.
type check struct {
	source, name, worst, measured string
	known, held                   bool
}

func checks(recs []Record) []check {
	all := cells(recs)
	small := func(op string) []cell { return []cell{{op, 64 << 10, 32}} }
	out := []check{
		ratioCheck(recs, "large GET (>=16 MiB) >= 0.9x direct", "direct", 0.9, largeCells(all, opGET)),
		ratioCheck(recs, "large PUT (>=16 MiB, incl. multipart) >= 0.9x direct", "direct", 0.9, largeCells(all, opPUT)),
		ratioCheck(recs, "small GET (64 KiB, 32 clients) >= 0.85x direct", "direct", 0.85, small(opGET)),
		ratioCheck(recs, "small PUT (64 KiB, 32 clients) >= 0.75x direct", "direct", 0.75, small(opPUT)),
		ratioCheck(recs, "GET >= 1.5x versitygw (every GET cell)", "versitygw", 1.5, getCells(all)),
		ratioCheck(recs, "PUT >= 1.0x versitygw (every PUT cell)", "versitygw", 1.0, putCells(all)),
		rssCheck(recs, "RSS growth < 64 MiB over idle while streaming"),
	}
	for i := range out {
		out[i].source = srcDesign
	}
	out = append(out, issue15Checks(recs)...)
	return append(append(out, issue35Checks(recs)...), notifyCheck(recs))
}

func ratioCheck(recs []Record, name, den string, min float64, cs []cell) check {
	ch := check{name: name, held: true}
	worst := 0.0
	for _, c := range cs {
		s, ok := ratio(recs, "fencegate", den, c)
		if !ok {
			continue
		}
		if !ch.known || s.med < worst {
			worst = s.med
			ch.worst, ch.measured = cellLabel(c), s.String()+"x"
		}
		ch.known = true
		ch.held = ch.held && s.med >= min
	}
	if n := len(cs); n > 1 && ch.known {
		ch.worst += fmt.Sprintf(" (of %d cells)", n)
	}
	return ch
}

func heldList(recs []Record) string {
	var held, not, unknown []string
	for _, c := range checks(recs) {
		switch {
		case !c.known:
			unknown = append(unknown, c.name)
		case c.held:
			held = append(held, c.name)
		default:
			not = append(not, c.name)
		}
	}
	out := fmt.Sprintf("%d of %d held", len(held), len(held)+len(not)+len(unknown))
	if len(not) > 0 {
		out += "; not held: " + strings.Join(not, "; ")
	}
	if len(unknown) > 0 {
		out += "; not measured: " + strings.Join(unknown, "; ")
	}
	return out
}

// dbCPUms is PostgreSQL's CPU ms per operation, with [min-max] over rounds
// where the record has them.
func dbCPUms(r Record) string {
	if len(r.DBCPUSPerOpRounds) == 0 {
		return num(r.DBCPUSPerOp * 1000)
	}
	return scaled(summarize(r.DBCPUSPerOpRounds), 1000).String()
}

func scaled(s stats, k float64) stats { return stats{s.med * k, s.min * k, s.max * k} }
