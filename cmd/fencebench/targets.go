package main

import (
	"fmt"
	"strings"
)

// Where a target comes from: docs/DESIGN.md's performance targets, issue 15's
// "Done when" list (bench cells for what users hit), or issue 35's targets.
const (
	srcDesign  = "DESIGN.md"
	srcIssue15 = "issue 15"
	srcIssue35 = "issue 35"
)

// The cells issue 15's targets are judged on.
var (
	hotCell  = cell{opPUTHot, 64 << 10, 32}
	put64c1  = cell{opPUT, 64 << 10, 1}
	smallPUT = cell{opPUT, 64 << 10, 32}
	smallGET = cell{opGET, 64 << 10, 32}
	hot4Cell = cell{opPUTHot4, 64 << 10, 32} // issue 35's: hotKeys keys, 32/hotKeys writers each
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

// largeCells are the cells of all of at least 16 MiB of op (opPUT: multipart
// uploads too).
func largeCells(all []cell, op string) []cell {
	var out []cell
	for _, c := range all {
		if c.size >= 16<<20 && (c.op == op || op == opPUT && c.op == opMultipart) {
			out = append(out, c)
		}
	}
	return out
}

// getCells are the GET cells of all.
func getCells(all []cell) []cell {
	var out []cell
	for _, c := range all {
		if c.op == opGET {
			out = append(out, c)
		}
	}
	return out
}

// putCells are the cells of all that write through every target: none of the
// reservation cells (fencegate only, reported by reserve.go) nor the
// notification cell (judged by notifyCheck).
func putCells(all []cell) []cell {
	var out []cell
	for _, c := range all {
		if c.op != opGET && !isReserve(c) && c.op != opPUTNotify {
			out = append(out, c)
		}
	}
	return out
}

// rssCheck: fencegate's RSS grows by less than 64 MiB over idle while it
// streams; judged on the last streaming record that shows growth (its peak
// covers the streams before it). Not known without a streaming record.
func rssCheck(recs []Record, name string) check {
	ch := check{name: name}
	for _, r := range recs {
		if isStream(r) && (!ch.known || *r.RSSGrowthMiB > 0) {
			ch.known = true
			ch.worst = fmt.Sprintf("%s PUT then GET", sizeLabel(r.SizeBytes))
			ch.measured = fmt.Sprintf("+%s MiB (idle %s, peak %s)", num(*r.RSSGrowthMiB), num(*r.RSSIdleMiB), num(*r.RSSPeakMiB))
			ch.held = *r.RSSGrowthMiB < 64
		}
	}
	return ch
}

// issue35Checks are issue 35's targets, each judged on the median over the
// rounds of a per-round figure, with its [min-max], and shown beside what
// bounds it on this machine: the bare TCP relay (relay.go) and the ceiling of
// one writer at a time per key (1 / the store's own PUT 64 KiB c=1 p50).
func issue35Checks(recs []Record) []check {
	all := cells(recs)
	var puts []cell
	for _, c := range putCells(all) {
		if c.op != opPUTHot {
			puts = append(puts, c)
		}
	}
	large := append(largeCells(all, opGET), largeCells(all, opPUT)...)
	out := []check{
		ratioCheck(recs, "small PUT 64 KiB c=32 >= 0.60x the store", "direct", 0.60, []cell{smallPUT}),
		floorCheck(recs, 1.5),
		relayGETCheck(recs, 0.92),
		relayCPUCheck(recs, 0.05),
		ratioCheck(recs, "large GET and PUT (>=16 MiB, multipart included) >= 0.9x the store in every cell", "direct", 0.9, large),
		chainCheck(recs, "hot key >= 0.8x of 1 / (the store's PUT 64 KiB c=1 p50)", hotCell, 1, 0.8),
		chainCheck(recs, "4-key cell (8 writers a key) >= 0.8x of four such chains", hot4Cell, hotKeys, 0.8),
		perOpCheck(recs, "PostgreSQL CPU per small PUT <= 0.45 ms", smallPUT, dbCPURounds, 0.45),
		perOpCheck(recs, "gateway CPU per small PUT <= 0.40 ms", smallPUT, gatewayCPURounds, 0.40),
		ratioCheck(recs, "against versitygw: every GET cell >= 1.5x", "versitygw", 1.5, getCells(all)),
		ratioCheck(recs, "against versitygw: every PUT cell but the hot key >= 1.0x", "versitygw", 1.0, puts),
		rssCheck(recs, "RSS growth < 64 MiB while streaming 2 GiB, the spool back to zero"),
	}
	// The cells a check names when none of its records is there.
	unmeasured := map[int]string{
		0:  cellLabel(smallPUT),
		4:  "GET, PUT and multipart of 16 MiB and up",
		9:  "every GET cell",
		10: "every PUT cell but " + cellLabel(hotCell),
		11: "2 GiB PUT then GET",
	}
	for i := range out {
		out[i].source = srcIssue35
		if out[i].worst == "" {
			out[i].worst = unmeasured[i]
		}
	}
	// The records carry nothing on the spool: that part is the streaming
	// check's (fencegate's own tests), not this table's.
	if rss := &out[11]; rss.known {
		rss.measured += " (spool: see the streaming check)"
	}
	return out
}

// floorCheck: fencegate's PUT 64 KiB c=1 p50 over the two-transaction floor
// (floorRows: the floor record's p50 plus the direct PUT's, round by round) is
// at most max.
func floorCheck(recs []Record, max float64) check {
	ch := check{name: fmt.Sprintf("small PUT 64 KiB c=1 p50 <= %gx the two-transaction floor", max),
		worst: cellLabel(put64c1) + " vs the floor"}
	for _, row := range floorRows(recs) {
		if row.size != put64c1.size || row.overFloor == nil || row.fgP50 == nil || row.floor.med <= 0 || row.fgP50.med <= 0 {
			continue
		}
		ch.known, ch.held = true, row.overFloor.med <= max
		ch.measured = fmt.Sprintf("%sx (p50 %s ms, floor %s ms)", row.overFloor, num(row.fgP50.med), num(row.floor.med))
	}
	return ch
}

// relayGETCheck: fencegate's MiB/s on GET 64 KiB c=32 over the relay's,
// round-paired, is at least min; the relay's and fencegate's own ratios to
// the store beside it.
func relayGETCheck(recs []Record, min float64) check {
	ch := ratioCheck(recs, fmt.Sprintf("small GET 64 KiB c=32 >= %gx the relay", min), relayTarget, min, []cell{smallGET})
	if !ch.known {
		ch.worst = cellLabel(smallGET)
		return ch
	}
	var beside []string
	if s, ok := ratio(recs, relayTarget, "direct", smallGET); ok {
		beside = append(beside, "relay "+num(s.med)+"x of the store")
	}
	if s, ok := ratio(recs, "fencegate", "direct", smallGET); ok {
		beside = append(beside, "fencegate "+num(s.med)+"x")
	}
	if len(beside) > 0 {
		ch.measured += " (" + strings.Join(beside, ", ") + ")"
	}
	return ch
}

// relayCPUCheck: fencegate's CPU per GET 64 KiB c=32 exceeds the relay's by
// at most maxMs, round by round (or on the medians when their rounds do not
// pair).
func relayCPUCheck(recs []Record, maxMs float64) check {
	ch := check{name: fmt.Sprintf("gateway CPU per GET 64 KiB c=32 <= the relay's + %g ms", maxMs), worst: cellLabel(smallGET)}
	fg, rel := findRec(recs, "fencegate", smallGET), findRec(recs, relayTarget, smallGET)
	if fg == nil || rel == nil || fg.OpsTotal == 0 || rel.OpsTotal == 0 {
		return ch
	}
	d := scaled(pairRounds(fg.CPUSPerOpRounds, rel.CPUSPerOpRounds, fg.CPUSPerOp, rel.CPUSPerOp, func(a, b float64) float64 { return a - b }), 1000)
	f, _ := gatewayCPURounds(fg)
	r, _ := gatewayCPURounds(rel)
	sign := ""
	if d.med >= 0 {
		sign = "+"
	}
	ch.known, ch.held = true, d.med <= maxMs
	ch.measured = fmt.Sprintf("%s ms against the relay's %s ms: %s%s ms", num(f.med*1000), num(r.med*1000), sign, d)
	return ch
}

// chainCheck: with one writer at a time per key and nothing but the store's
// own PUT in each key's chain, keys keys take at most keys / (the store's PUT
// 64 KiB c=1 p50) writes a second; fencegate's cell c must reach min of that,
// round by round.
func chainCheck(recs []Record, name string, c cell, keys int, min float64) check {
	ch := check{name: name, worst: cellLabel(c) + " vs direct " + cellLabel(put64c1)}
	h, l := findRec(recs, "fencegate", c), findRec(recs, "direct", put64c1)
	if h == nil || l == nil || h.OpsTotal == 0 || l.P50Ms <= 0 {
		return ch
	}
	v := writesPerLatency(h, l)
	for i := range v {
		v[i] /= float64(keys)
	}
	s := summarize(v)
	if len(v) == 0 { // no rounds recorded: the medians
		m := h.OpsPerS * l.P50Ms / 1000 / float64(keys)
		s = stats{m, m, m}
	}
	ch.known, ch.held = true, s.med >= min
	ch.measured = fmt.Sprintf("%sx (%s PUT/s; ceiling %d / %s ms = %s/s)", s, num(h.OpsPerS), keys, num(l.P50Ms), num(float64(keys)*1000/l.P50Ms))
	return ch
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
