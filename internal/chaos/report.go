package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/chaos/history"
)

// Report is what a campaign found.
type Report struct {
	Seed       uint64         `json:"seed"`
	Duration   time.Duration  `json:"duration"`
	Ops        int            `json:"ops"`
	OpCounts   map[string]int `json:"op_counts"`
	Faults     []Fault        `json:"faults"`
	FaultCount map[string]int `json:"fault_counts"`
	Unknown    map[string]int `json:"unknown_settled"` // unknown outcomes by how they were settled
	Leftover   map[string]int `json:"attempts_left_unknown"`
	// Reservations: what the reservation workload did and how its
	// reservations ended (reservations_check.go).
	Reservations map[string]int `json:"reservations,omitempty"`
	Violations   []string       `json:"violations"`
	// NotLinearizable: the history check found an illegal history (as
	// opposed to any other violation).
	NotLinearizable bool   `json:"not_linearizable"`
	Checked         string `json:"checked"`
	// Notifications: what each notification target got (notifycheck.go).
	Notifications []NotifyCheck `json:"notifications"`
	Elapsed       time.Duration `json:"elapsed"`
	Dir           string        `json:"dir"`
	// KeepHistory: WriteFiles writes the history of a run that passed too.
	KeepHistory bool `json:"-"`
	history     []history.Op
	check       *history.Result
	replay      string
}

// Failed reports whether the campaign found anything wrong.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

func countOps(ops []history.Op) map[string]int {
	m := map[string]int{}
	for _, o := range ops {
		name := string(o.Kind)
		if o.Gateway < 0 {
			name = "direct " + name
		}
		m[name+" "+string(o.Outcome)]++
	}
	return m
}

// WriteFiles writes the run's report (report.json, summary.txt) and chart
// (chart.png, chart.svg) into its folder and, when the run failed, what is
// needed to understand and replay it: the history (history.jsonl),
// porcupine's visualization (linearizability.html) and REPLAY; the fault
// schedule is in the report and the gateways' logs are there already.
func (r *Report) WriteFiles() error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	errs := []error{
		os.WriteFile(filepath.Join(r.Dir, "report.json"), b, 0o644),
		os.WriteFile(filepath.Join(r.Dir, "summary.txt"), []byte(r.Summary()), 0o644),
		r.WriteChart(filepath.Join(r.Dir, "chart.png")),
	}
	if r.Failed() || r.KeepHistory {
		errs = append(errs, history.WriteFile(filepath.Join(r.Dir, "history.jsonl"), r.history))
	}
	if r.Failed() {
		replay := fmt.Sprintf(r.replay+"\n", r.Seed, r.Duration)
		errs = append(errs, os.WriteFile(filepath.Join(r.Dir, "REPLAY"), []byte(replay), 0o644))
		if r.NotLinearizable && r.check != nil {
			errs = append(errs, r.check.Visualize(filepath.Join(r.Dir, "linearizability.html")))
		}
	}
	return errors.Join(errs...)
}

// Summary is the report in a few lines.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %s of workload (%s in all): %d operations\n", r.Seed, r.Duration, r.Elapsed.Round(time.Second), r.Ops)
	b.WriteString("operations: " + sortedCounts(r.OpCounts) + "\n")
	b.WriteString("faults: " + sortedCounts(r.FaultCount) + "\n")
	b.WriteString("unknown outcomes, settled: " + sortedCounts(r.Unknown) + "\n")
	b.WriteString("attempts left unknown: " + sortedCounts(r.Leftover) + "\n")
	if r.Reservations != nil {
		b.WriteString("reservations: " + sortedCounts(r.Reservations) + "\n")
	}
	b.WriteString("check: " + r.Checked + "\n")
	for _, n := range r.Notifications {
		b.WriteString("notifications: " + n.String() + "\n")
	}
	if len(r.Violations) == 0 {
		b.WriteString("no violations\n")
	} else {
		fmt.Fprintf(&b, "%d violations:\n", len(r.Violations))
		for i, v := range r.Violations {
			if i == 20 {
				fmt.Fprintf(&b, "  ... %d more in %s\n", len(r.Violations)-20, filepath.Join(r.Dir, "report.json"))
				break
			}
			b.WriteString("  " + v + "\n")
		}
		fmt.Fprintf(&b, "evidence in %s; replay: "+r.replay+"\n", r.Dir, r.Seed, r.Duration)
	}
	return b.String()
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
