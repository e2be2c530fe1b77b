package main

import "fmt"

// Where a target comes from: docs/DESIGN.md's performance targets, or issue
// 15's "Done when" list (bench cells for what users hit).
const (
	srcDesign  = "DESIGN.md"
	srcIssue15 = "issue 15"
)

// The cells issue 15's targets are judged on.
var (
	hotCell  = cell{opPUTHot, 64 << 10, 32}
	put64c1  = cell{opPUT, 64 << 10, 1}
	smallPUT = cell{opPUT, 64 << 10, 32}
	smallGET = cell{opGET, 64 << 10, 32}
)

// issue15Checks are issue 15's targets, each judged on the median over the
// rounds of a per-round figure, with its [min-max].
func issue15Checks(recs []Record) []check {
	out := []check{
		hotVsLatency(recs, 0.9),
		ratioCheck(recs, "hot key 64 KiB c=32 >= 0.5x direct", "direct", 0.5, []cell{hotCell}),
		hotTail(recs, 10),
		perOpCheck(recs, "PostgreSQL CPU per small PUT (64 KiB c=32) <= 0.6 ms", smallPUT, dbCPURounds, 0.6),
		perOpCheck(recs, "fencegate CPU per small PUT (64 KiB c=32) <= 0.35 ms", smallPUT, gatewayCPURounds, 0.35),
		ratioCheck(recs, "small PUT (64 KiB c=32) >= 0.55x direct", "direct", 0.55, []cell{smallPUT}),
		perOpCheck(recs, "fencegate CPU per 64 KiB GET (c=32) <= 0.1 ms", smallGET, gatewayCPURounds, 0.1),
		ratioCheck(recs, "GET 64 KiB c=32 >= 0.85x direct", "direct", 0.85, []cell{smallGET}),
	}
	for i := range out {
		out[i].source = srcIssue15
	}
	for _, i := range []int{1, 5, 7} { // ratioCheck names no cell it could not judge
		if out[i].worst == "" {
			out[i].worst = []string{1: cellLabel(hotCell), 5: cellLabel(smallPUT), 7: cellLabel(smallGET)}[i]
		}
	}
	return out
}

// opsRounds is a record's operations per second round by round.
func opsRounds(r *Record) []float64 {
	var out []float64
	for _, m := range r.MiBPerSRounds {
		out = append(out, m*(1<<20)/float64(r.SizeBytes))
	}
	return out
}

// hotVsLatency: one key's writers queue, so the hot key's throughput is at best
// one write per single-client write latency; it must reach min of
// 1 / (fencegate's PUT 64 KiB c=1 p50), round by round.
func hotVsLatency(recs []Record, min float64) check {
	ch := check{name: fmt.Sprintf("hot key 64 KiB c=32 ops/s >= %gx 1 / (PUT 64 KiB c=1 p50)", min),
		worst: cellLabel(hotCell) + " vs " + cellLabel(put64c1)}
	h, l := findRec(recs, "fencegate", hotCell), findRec(recs, "fencegate", put64c1)
	if h == nil || l == nil || h.OpsTotal == 0 || l.P50Ms <= 0 {
		return ch
	}
	v := writesPerLatency(h, l)
	s := summarize(v)
	if len(v) == 0 { // no rounds recorded: the medians
		m := h.OpsPerS * l.P50Ms / 1000
		s = stats{m, m, m}
	}
	ch.known, ch.held = true, s.med >= min
	ch.measured = fmt.Sprintf("%sx (%s ops/s; 1 / p50 = %s/s)", s, num(h.OpsPerS), num(1000/l.P50Ms))
	return ch
}

// writesPerLatency is, round by round, hot's operations per second times
// lat's p50 in seconds: how many of lat's one-client writes hot made in the
// time one takes. nil when a round is missing or has no latency.
func writesPerLatency(hot, lat *Record) []float64 {
	ops := opsRounds(hot)
	if len(ops) == 0 || len(lat.P50MsRounds) != len(ops) {
		return nil
	}
	var v []float64
	for i := range ops {
		if lat.P50MsRounds[i] <= 0 {
			return nil
		}
		v = append(v, ops[i]*lat.P50MsRounds[i]/1000)
	}
	return v
}

// hotTail: on the hot key, fencegate's p99 under max times its p50, round by round.
func hotTail(recs []Record, max float64) check {
	ch := check{name: fmt.Sprintf("hot key 64 KiB c=32 p99 < %gx p50", max), worst: cellLabel(hotCell)}
	h := findRec(recs, "fencegate", hotCell)
	if h == nil || h.OpsTotal == 0 || h.P50Ms <= 0 {
		return ch
	}
	var v []float64
	if n := len(h.P50MsRounds); n > 0 && len(h.P99MsRounds) == n {
		for i := range n {
			if h.P50MsRounds[i] > 0 {
				v = append(v, h.P99MsRounds[i]/h.P50MsRounds[i])
			}
		}
	}
	s := summarize(v)
	if len(v) == 0 {
		m := h.P99Ms / h.P50Ms
		s = stats{m, m, m}
	}
	ch.known, ch.held = true, s.med < max
	ch.measured = fmt.Sprintf("p99/p50 %sx (p50 %s ms, p99 %s ms)", s, num(h.P50Ms), num(h.P99Ms))
	return ch
}

// gatewayCPURounds and dbCPURounds are a record's CPU seconds per operation
// over its rounds; ok is false when only the median was recorded.
func gatewayCPURounds(r *Record) (stats, bool) {
	if len(r.CPUSPerOpRounds) > 0 {
		return summarize(r.CPUSPerOpRounds), true
	}
	return stats{r.CPUSPerOp, r.CPUSPerOpMin, r.CPUSPerOpMax}, true
}

func dbCPURounds(r *Record) (stats, bool) {
	if len(r.DBCPUSPerOpRounds) > 0 {
		return summarize(r.DBCPUSPerOpRounds), true
	}
	return stats{r.DBCPUSPerOp, r.DBCPUSPerOp, r.DBCPUSPerOp}, false
}

// perOpCheck: fencegate's cell c spends at most maxMs CPU ms per operation
// (median over rounds of each round's figure).
func perOpCheck(recs []Record, name string, c cell, cpu func(*Record) (stats, bool), maxMs float64) check {
	ch := check{name: name, worst: cellLabel(c)}
	r := findRec(recs, "fencegate", c)
	if r == nil || r.OpsTotal == 0 {
		return ch
	}
	s, rounds := cpu(r)
	s = scaled(s, 1000)
	ch.known, ch.held = true, s.med <= maxMs
	ch.measured = s.String() + " ms"
	if !rounds {
		ch.measured = num(s.med) + " ms (median; this results file has no rounds)"
	}
	return ch
}
