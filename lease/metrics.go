package lease

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts the protocol's events.
type Metrics struct {
	Acquired    prometheus.Counter
	Waited      prometheus.Counter
	Refused     *prometheus.CounterVec // reason: conflict (409), busy (503)
	Lost        prometheus.Counter
	Commits     prometheus.Counter
	Unknown     prometheus.Counter
	Settlements *prometheus.CounterVec // kind: adopted, external, deleted_external, deleted_adopted, in_sync
}

// NewMetrics makes the counters and registers them with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Acquired: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_leases_acquired_total", Help: "Key leases acquired."}),
		Waited:   prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_leases_waited_total", Help: "Leases acquired after waiting for another writer."}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_leases_refused_total",
			Help: "Lease requests refused: conflict (409, the writer had its own condition) or busy (503 after the bounded wait)."}, []string{"reason"}),
		Lost:    prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_leases_lost_total", Help: "Leases lost while held (renewal failed or local deadline passed)."}),
		Commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_commits_total", Help: "Generations committed by their writer."}),
		Unknown: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_unknown_outcomes_total", Help: "Writes whose outcome is unknown (kept as guards)."}),
		Settlements: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_settlements_total",
			Help: "Keys settled before a write or by the reconciler, by what was found."}, []string{"kind"}),
	}
	if reg != nil {
		m.Register(reg)
	}
	return m
}

// Register adds the counters to reg.
func (m *Metrics) Register(reg prometheus.Registerer) {
	reg.MustRegister(m.Acquired, m.Waited, m.Refused, m.Lost, m.Commits, m.Unknown, m.Settlements)
}
