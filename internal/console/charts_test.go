package console

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The ring keeps the window's samples oldest first across its wrap, the
// rates are per second between samples, the totals are the growth within
// the window, and the SVG draws one line per chart.
func TestSamplerWindowAndRates(t *testing.T) {
	reg := prometheus.NewRegistry()
	commits := prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_commits_total"})
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_requests_total"}, []string{"op", "status"})
	reg.MustRegister(commits, requests)
	s := NewSampler(15 * time.Minute) // a ring of 6
	if len(s.ring) != 6 {
		t.Fatalf("ring of %d", len(s.ring))
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 10 {
		commits.Add(float64(i)) // totals 0 1 3 6 10 15 21 28 36 45
		requests.WithLabelValues("put", "503").Inc()
		requests.WithLabelValues("put", "200").Add(5)
		s.take(reg, start.Add(time.Duration(i)*10*time.Minute))
	}
	now := start.Add(90 * time.Minute)
	smps := s.samples(now)
	// Kept: the samples at 40..90 min; in the window (30..90 min): all six.
	if len(smps) != 6 || !smps[0].at.Equal(start.Add(40*time.Minute)) || !smps[5].at.Equal(now) {
		t.Fatalf("samples %v", smps)
	}
	ch := s.Charts(now.Add(15 * time.Minute)) // window 45..105 min: 50..90 min
	got := map[string]float64{}
	for _, c := range ch.Charts {
		got[c.Name] = c.Total
		if strings.Count(string(c.SVG), "<polyline") != 1 {
			t.Errorf("%s: svg %s", c.Name, c.SVG)
		}
	}
	if got["writes"] != 45-15 || got["5xx"] != 4 || got["lease_waits"] != 0 {
		t.Fatalf("totals %v", got)
	}
	if p := ch.Charts[0].Points[len(ch.Charts[0].Points)-1]; p.Rate != 9.0/600 {
		t.Fatalf("last rate %v, want 9 per 600 s", p.Rate)
	}
}
