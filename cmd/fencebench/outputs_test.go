package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A quick run's noisy figures must not replace the committed full run's files
// unless a flag names them.
func TestQuickRunWritesOutsideDocs(t *testing.T) {
	full := options{out: "docs/bench-results.json", docs: "docs"}
	for _, tc := range []struct {
		name      string
		quick     bool
		set       map[string]bool
		out, docs string
	}{
		{"full run", false, nil, "docs/bench-results.json", "docs"},
		{"quick run", true, nil, quickDir + "/bench-results.json", quickDir},
		{"quick run, -out given", true, map[string]bool{"out": true}, "docs/bench-results.json", quickDir},
		{"quick run, -docs given", true, map[string]bool{"docs": true}, quickDir + "/bench-results.json", "docs"},
	} {
		o := full
		o.quick = tc.quick
		quickOutputs(&o, tc.set)
		if o.out != tc.out || o.docs != tc.docs {
			t.Errorf("%s: writes %s and %s/, want %s and %s/", tc.name, o.out, o.docs, tc.out, tc.docs)
		}
	}
	if !strings.HasPrefix(quickDir, "bin/") {
		t.Errorf("quickDir %s is not under bin/, which git ignores", quickDir)
	}
}

// The plot is drawn as PNG and SVG from a results file.
func TestWritePlots(t *testing.T) {
	recs := []Record{
		{Target: "direct", Op: opGET, SizeBytes: 4 << 10, Concurrency: 1, MiBPerS: 3, MiBPerSMin: 2, MiBPerSMax: 4},
		{Target: "direct", Op: opGET, SizeBytes: 1 << 20, Concurrency: 1, MiBPerS: 300, MiBPerSMin: 250, MiBPerSMax: 320},
		{Target: "fencegate", Op: opPUT, SizeBytes: 64 << 10, Concurrency: 32, MiBPerS: 20},
	}
	png := filepath.Join(t.TempDir(), "throughput.png")
	if err := writePlots(png, recs); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{png, strings.TrimSuffix(png, ".png") + ".svg"} {
		if fi, err := os.Stat(p); err != nil || fi.Size() < 1000 {
			t.Errorf("%s: %v (size %v)", p, err, fi)
		}
	}
}

// rec is a record of target in cell c with the given rounds (MiB/s, p50 and
// p99 ms, gateway and PostgreSQL CPU seconds per operation), summarised the
// way aggregate does.
func rec(target string, c cell, mib, p50, p99, cpu, db []float64) Record {
	m, a, b, g, d := summarize(mib), summarize(p50), summarize(p99), summarize(cpu), summarize(db)
	return Record{
		Target: target, Op: c.op, SizeBytes: c.size, Concurrency: c.conc, Rounds: len(mib), OpsTotal: 1000,
		MiBPerS: m.med, MiBPerSMin: m.min, MiBPerSMax: m.max, MiBPerSRounds: mib,
		OpsPerS: m.med * (1 << 20) / float64(max(c.size, 1)),
		P50Ms:   a.med, P50MsMin: a.min, P50MsMax: a.max, P50MsRounds: p50,
		P99Ms: b.med, P99MsMin: b.min, P99MsMax: b.max, P99MsRounds: p99,
		CPUSPerOp: g.med, CPUSPerOpMin: g.min, CPUSPerOpMax: g.max, CPUSPerOpRounds: cpu,
		DBCPUSPerOp: d.med, DBCPUSPerOpRounds: db,
	}
}

func r3(v float64) []float64 { return []float64{v, v, v} }

// The floor is the two transactions' p50 plus the direct PUT's, round by
// round, and fencegate's p50 is set against it; without the two transactions'
// record the floor is not measured.
func TestFloorRows(t *testing.T) {
	c4 := cell{opPUT, 4 << 10, 1}
	recs := []Record{
		{Target: floorTarget, Op: opFloor, Concurrency: 1, OpsTotal: 100, P50Ms: 1, P50MsMin: 0.8, P50MsMax: 1.2, P50MsRounds: []float64{1, 1.2, 0.8}, P99Ms: 4},
		rec("direct", c4, r3(1), []float64{2, 2, 2.5}, r3(5), r3(0.002), r3(0)),
		rec("fencegate", c4, r3(0.5), []float64{6, 6.6, 6.6}, r3(15), r3(0.0015), r3(0.001)),
	}
	if cs := cells(recs); len(cs) != 1 || cs[0] != c4 {
		t.Errorf("cells %v: the floor's record is not a cell", cs)
	}
	rows := floorRows(recs)
	if len(rows) != 2 || rows[0].size != 4<<10 {
		t.Fatalf("rows %+v", rows)
	}
	if r := rows[0]; r.floor == nil || *r.floor != (stats{3.2, 3, 3.3}) || r.overFloor == nil || r.overFloor.med != 2 {
		t.Errorf("PUT 4 KiB c=1: floor %v, fencegate over it %v; want 3.2 [3-3.3] and 2x", r.floor, r.overFloor)
	}
	if got := strings.Join(rows[1].cells(), " | "); got != "PUT 64 KiB c=1 | 1.00 [0.8-1.20] (p99 4.00) | not measured | not measured | not measured | not measured | not measured" {
		t.Errorf("PUT 64 KiB c=1 without records: %s", got)
	}
	if got := floorRows(recs[1:])[0].cells(); got[1] != "not measured" || got[3] != "not measured" || got[4] != "6.60 [6.00-6.60]" {
		t.Errorf("without the two transactions: %v", got)
	}
	if md := markdown(machine{}, recs); !strings.Contains(md, "| PUT 4 KiB c=1 | 1.00 [0.8-1.20] (p99 4.00) | 2.00 [2.00-2.50] | 3.20 [3.00-3.30] |") {
		t.Errorf("PERFORMANCE.md lacks the floor row:\n%s", md)
	}
}
