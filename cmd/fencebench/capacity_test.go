package main

import (
	"math"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// The sizing arithmetic: cores at capacityBusy from ms per operation and the
// rate, rates adding, store nodes rounded up with a floor, commits and disk.
func TestSizeFor(t *testing.T) {
	c := sizingCosts{
		Put:       roleCPU{PGPrimary: 1, PGStandby: 0.2, Gateways: 2, HAProxy: 0.25, Volumes: 4, Filer: 2, S3: 1.5, Master: 0.5},
		Get:       roleCPU{PGPrimary: 0.1, Gateways: 0.5, Volumes: 1, S3: 1},
		PutTxns:   0.5,
		SizeBytes: 64 << 10,
	}
	s := sizeFor(c, 1000, 0)
	// 1 ms × 1000/s = 1 core busy; at 50% busy, 2 cores.
	if !near(s.DBCores, 2) || !near(s.StandbyCores, 0.4) || !near(s.GatewayCores, 4) || !near(s.BalancerCores, 0.5) {
		t.Errorf("1000 PUT/s: PG %.2f, standby %.2f, gateways %.2f, HAProxy %.2f cores; want 2, 0.4, 4, 0.5", s.DBCores, s.StandbyCores, s.GatewayCores, s.BalancerCores)
	}
	// The store: 8 ms/PUT → 16 cores → 4 nodes of 4 cores.
	if !near(s.StoreCores, 16) || s.StoreNodes != 4 {
		t.Errorf("1000 PUT/s: store %.2f cores, %d nodes; want 16 and 4", s.StoreCores, s.StoreNodes)
	}
	if !near(s.CommitsPerS, 500) {
		t.Errorf("1000 PUT/s: %.0f write transactions/s; want 500", s.CommitsPerS)
	}
	// A 32-core primary at 50% busy, 1 ms per PUT: 16,000 PUT/s.
	if got := primaryCeiling(c, 32); !near(got, 16000) {
		t.Errorf("a 32-core primary carries %.0f PUT/s; want 16000", got)
	}
	if !near(s.DiskMiBPerS, 125) { // 1000 × 64 KiB × 2 copies
		t.Errorf("1000 PUT/s: %.1f MiB/s written; want 125", s.DiskMiBPerS)
	}
	// A little past a whole node rounds up; a small rate keeps the floor.
	if n := sizeFor(c, 1001, 0).StoreNodes; n != 5 {
		t.Errorf("1001 PUT/s: %d store nodes; want 5", n)
	}
	if n := sizeFor(c, 10, 0).StoreNodes; n != minStoreNodes {
		t.Errorf("10 PUT/s: %d store nodes; want the floor %d", n, minStoreNodes)
	}
	// Rates add.
	mix, get := sizeFor(c, 1000, 2000), sizeFor(c, 0, 2000)
	if !near(mix.GatewayCores, s.GatewayCores+get.GatewayCores) || !near(get.GatewayCores, 2) || !near(get.CommitsPerS, 0) || !near(get.DiskMiBPerS, 0) {
		t.Errorf("GETs: gateway cores %.2f alone, %.2f mixed with 1000 PUT/s; want 2 and %.2f, no commits or disk writes", get.GatewayCores, mix.GatewayCores, s.GatewayCores+2)
	}
}

// The sizing takes each part's worst cost over the runs, and none from the
// hot key's.
func TestCostsOfTakesTheWorstRun(t *testing.T) {
	res := capacityResults{Config: capacityConfig{SizeBytes: 64 << 10}, Runs: []capacityRun{
		{Gateways: 1, Phases: []capacityPhase{
			{Op: opPUT, CPUMsPerOp: roleCPU{PGPrimary: 1, Gateways: 3}, WriteTxnPerOp: 0.4},
			{Op: opGET, CPUMsPerOp: roleCPU{Gateways: 0.5}},
			{Op: opPUTHotCluster, CPUMsPerOp: roleCPU{PGPrimary: 9, Gateways: 9}, WriteTxnPerOp: 2.1},
		}},
		{Gateways: 2, Phases: []capacityPhase{
			{Op: opPUT, CPUMsPerOp: roleCPU{PGPrimary: 2, Gateways: 1}, WriteTxnPerOp: 0.6},
			{Op: opGET, CPUMsPerOp: roleCPU{Gateways: 0.7}},
			{Op: opPUTHotCluster, WriteTxnPerOp: 1.9},
		}},
	}}
	c := costsOf(res)
	if c.Put.PGPrimary != 2 || c.Put.Gateways != 3 || c.Get.Gateways != 0.7 {
		t.Errorf("PUT costs %+v, GET %+v; want PG primary 2, gateways 3 per PUT and gateways 0.7 per GET", c.Put, c.Get)
	}
	if c.PutTxns != 0.6 || c.SizeBytes != 64<<10 {
		t.Errorf("write transactions per PUT %.2f, size %d; want 0.6 and 64 KiB", c.PutTxns, c.SizeBytes)
	}
}

// The generated section goes between its markers, the rest of the document
// untouched, or at the end when the markers are missing.
func TestReplaceSection(t *testing.T) {
	doc := "# Title\n\nintro\n"
	once := replaceSection(doc, "first\n")
	if !strings.HasPrefix(once, doc) || !strings.Contains(once, capacityBegin+"\nfirst\n"+capacityEnd) {
		t.Fatalf("appended:\n%s", once)
	}
	withTail := once + "\n## After\n\nkept\n"
	twice := replaceSection(withTail, "second\n")
	if strings.Contains(twice, "first") || !strings.Contains(twice, capacityBegin+"\nsecond\n"+capacityEnd+"\n\n## After\n\nkept\n") || !strings.HasPrefix(twice, doc) {
		t.Fatalf("replaced:\n%s", twice)
	}
	if replaceSection(twice, "second\n") != twice {
		t.Error("replacing a section with itself changed the document")
	}
}

// GETs spread over every key the PUT phase wrote.
func TestGetKeyReadsEveryKey(t *testing.T) {
	for _, n := range []int{1, 7, 2400, 2399} {
		seen := map[int]bool{}
		for i := 0; i < n; i++ {
			k := getKey(i, n)
			if k < 0 || k >= n {
				t.Fatalf("getKey(%d, %d) = %d, out of range", i, n, k)
			}
			seen[k] = true
		}
		if len(seen) != n {
			t.Errorf("n=%d: %d GETs read %d distinct keys", n, n, len(seen))
		}
	}
}
