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
