package notify

import "github.com/prometheus/client_golang/prometheus"

// Metrics are per target: events delivered, retried, failed (tries that
// failed) and dead-lettered, and the backlog.
type Metrics struct {
	Events      *prometheus.CounterVec // target, outcome
	Queued      *prometheus.GaugeVec   // target
	DeadLetters *prometheus.GaugeVec   // target
	Lag         *prometheus.GaugeVec   // target: oldest undelivered event's age
}

// NewMetrics makes the metrics and registers them with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_notify_events_total",
			Help: "Notification sends by target and outcome (delivered, failed, retried, dead_lettered)."}, []string{"target", "outcome"}),
		Queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fencegate_notify_queued",
			Help: "Events waiting for delivery per target."}, []string{"target"}),
		DeadLetters: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fencegate_notify_dead_letters",
			Help: "Dead-lettered events per target (fencegate targets redrive sends them again)."}, []string{"target"}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fencegate_notify_lag_seconds",
			Help: "Age of the oldest undelivered event per target, 0 if none."}, []string{"target"}),
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Queued, m.DeadLetters, m.Lag)
	}
	return m
}

func (m *Metrics) add(target, outcome string) {
	if m != nil {
		m.Events.WithLabelValues(target, outcome).Inc()
	}
}

func (m *Metrics) backlog(b map[string]Backlog) {
	for name, x := range b {
		m.Queued.WithLabelValues(name).Set(float64(x.Queued))
		m.DeadLetters.WithLabelValues(name).Set(float64(x.DeadLetters))
		m.Lag.WithLabelValues(name).Set(x.Lag.Seconds())
	}
}
