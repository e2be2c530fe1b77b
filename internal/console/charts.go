package console

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// ChartWindow is how far back the charts look.
const ChartWindow = time.Hour

// maxSamples bounds the ring whatever the interval.
const maxSamples = 4000

// A series is one chart: the sum of some of the gateway's own counters.
type series struct {
	Name, Title, Help string
	count             func(families map[string]*dto.MetricFamily) float64
}

var chartSeries = []series{
	{"writes", "Writes per second", "generations committed by their writer (fencegate_commits_total)",
		func(f map[string]*dto.MetricFamily) float64 { return sum(f, "fencegate_commits_total", nil) }},
	{"lease_waits", "Lease waits per second", "leases acquired after waiting for another writer (fencegate_leases_waited_total)",
		func(f map[string]*dto.MetricFamily) float64 { return sum(f, "fencegate_leases_waited_total", nil) }},
	{"refusals", "Refusals per second", "lease refusals, connections and bodies refused with 503 SlowDown (fencegate_leases_refused_total, fencegate_connections_refused_total, fencegate_body_memory_refused_total)",
		func(f map[string]*dto.MetricFamily) float64 {
			return sum(f, "fencegate_leases_refused_total", nil) + sum(f, "fencegate_connections_refused_total", nil) +
				sum(f, "fencegate_body_memory_refused_total", nil)
		}},
	{"5xx", "5xx answers per second", "S3 requests answered with a 5xx status (fencegate_requests_total)",
		func(f map[string]*dto.MetricFamily) float64 {
			return sum(f, "fencegate_requests_total", func(m *dto.Metric) bool {
				for _, l := range m.GetLabel() {
					if l.GetName() == "status" {
						return strings.HasPrefix(l.GetValue(), "5")
					}
				}
				return false
			})
		}},
}

// sum adds the counters of a family whose metrics pass keep (all if nil).
func sum(families map[string]*dto.MetricFamily, name string, keep func(*dto.Metric) bool) float64 {
	var n float64
	for _, m := range families[name].GetMetric() {
		if keep == nil || keep(m) {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

type sample struct {
	at     time.Time
	values []float64 // chartSeries' counters, in order
}

// Sampler keeps a ring of the gateway's counters, read from its Prometheus
// registry every interval, for the charts page. It keeps them in memory
// only: each gateway charts itself, from its start or the last hour.
type Sampler struct {
	interval time.Duration
	mu       sync.Mutex
	ring     []sample
	next     int
	full     bool
}

// NewSampler keeps a sample every interval (the last hour's, at most 4000).
func NewSampler(interval time.Duration) *Sampler {
	n := int(ChartWindow/interval) + 2
	if n > maxSamples {
		n = maxSamples
	}
	return &Sampler{interval: interval, ring: make([]sample, n)}
}

// Run samples g at once and then every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context, g prometheus.Gatherer) {
	s.take(g, time.Now())
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.take(g, now)
		}
	}
}

func (s *Sampler) take(g prometheus.Gatherer, now time.Time) {
	fams, err := g.Gather()
	if err != nil && len(fams) == 0 {
		return
	}
	byName := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	smp := sample{at: now, values: make([]float64, len(chartSeries))}
	for i, c := range chartSeries {
		smp.values[i] = c.count(byName)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring[s.next] = smp
	s.next = (s.next + 1) % len(s.ring)
	if s.next == 0 {
		s.full = true
	}
}

// samples returns the samples of the window, oldest first.
func (s *Sampler) samples(now time.Time) []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []sample
	if s.full {
		all = append(all, s.ring[s.next:]...)
	}
	all = append(all, s.ring[:s.next]...)
	from := now.Add(-ChartWindow)
	i := 0
	for i < len(all) && all[i].at.Before(from) {
		i++
	}
	return all[i:]
}

// Point is one rate of a chart: per second, between a sample and the one
// before it, at the later one's time.
type Point struct {
	At   time.Time `json:"at"`
	Rate float64   `json:"per_second"`
}

// Chart is one series over the window. Total is what its counters grew by
// between the window's first and last samples.
type Chart struct {
	Name   string        `json:"name"`
	Title  string        `json:"title"`
	Help   string        `json:"counts"`
	Total  float64       `json:"total"`
	Max    float64       `json:"max_per_second"`
	Points []Point       `json:"points"`
	SVG    template.HTML `json:"-"`
}

// Charts is the charts page.
type Charts struct {
	IntervalSeconds float64   `json:"interval_seconds"`
	From            time.Time `json:"from"`
	To              time.Time `json:"to"`
	Samples         int       `json:"samples"`
	Charts          []Chart   `json:"charts"`
}

// Charts computes the window's rates and draws them.
func (s *Sampler) Charts(now time.Time) Charts {
	smps := s.samples(now)
	out := Charts{IntervalSeconds: s.interval.Seconds(), From: now.Add(-ChartWindow), To: now, Samples: len(smps)}
	for i, c := range chartSeries {
		ch := Chart{Name: c.Name, Title: c.Title, Help: c.Help, Points: []Point{}}
		for j := 1; j < len(smps); j++ {
			dt := smps[j].at.Sub(smps[j-1].at).Seconds()
			d := smps[j].values[i] - smps[j-1].values[i]
			if dt <= 0 || d < 0 { // a counter never falls: skip a reset
				continue
			}
			r := d / dt
			ch.Points = append(ch.Points, Point{At: smps[j].at.UTC(), Rate: r})
			ch.Max = math.Max(ch.Max, r)
			ch.Total += d
		}
		ch.SVG = drawChart(ch, out.From, now)
		out.Charts = append(out.Charts, ch)
	}
	return out
}

const (
	chartW, chartH = 720, 140
	padL, padB     = 56, 20
)

// drawChart renders a chart as inline SVG: a step line of the rate over the
// window, its peak on the y axis, the window's ends on the x axis.
func drawChart(c Chart, from, to time.Time) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		chartW, chartH, chartW, chartH, template.HTMLEscapeString(c.Title))
	plotW, plotH := float64(chartW-padL-8), float64(chartH-padB-8)
	x0, y0 := float64(padL), float64(8)
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="#f7f9fc" stroke="#d8dde6"/>`, x0, y0, plotW, plotH)
	top := c.Max
	if top == 0 {
		top = 1
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="11" text-anchor="end" fill="#4a5566">%s/s</text>`, x0-4, y0+10, fmtRate(top))
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="11" text-anchor="end" fill="#4a5566">0</text>`, x0-4, y0+plotH)
	fmt.Fprintf(&b, `<text x="%g" y="%d" font-size="11" fill="#4a5566">−60 min</text>`, x0, chartH-4)
	fmt.Fprintf(&b, `<text x="%g" y="%d" font-size="11" text-anchor="end" fill="#4a5566">now</text>`, x0+plotW, chartH-4)
	span := to.Sub(from).Seconds()
	if len(c.Points) > 0 {
		var pts []string
		for _, p := range c.Points {
			x := x0 + plotW*p.At.Sub(from).Seconds()/span
			y := y0 + plotH*(1-p.Rate/top)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#2f6fde" stroke-width="1.5" points="%s"/>`, strings.Join(pts, " "))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built here from numbers and an escaped title
}

func fmtRate(r float64) string {
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f", r)
	case r >= 1:
		return fmt.Sprintf("%.1f", r)
	}
	return fmt.Sprintf("%.2g", r)
}
