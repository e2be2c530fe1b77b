package lease

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LifecycleMetrics are the service's: items per work kind and outcome,
// backlog gauges, and the ages operators watch.
type LifecycleMetrics struct {
	Items           *prometheus.CounterVec // kind, outcome: claimed, completed, retried, skipped, failed
	Backlog         *prometheus.GaugeVec   // kind
	OldestUnknown   prometheus.Gauge
	OldestAbandoned prometheus.Gauge
	// ReservationsExpired counts the reservations this gateway's sweeper
	// ended at their expiry (the gateway counts the other moves).
	ReservationsExpired prometheus.Counter
	// ReservationSweeps counts what this gateway's sweeper did at the store
	// after ended reservations, by action: upload_aborted (an open multipart
	// upload bound to one), bytes_deleted (bytes of its attempts at its key).
	ReservationSweeps *prometheus.CounterVec
}

// NewLifecycleMetrics makes the metrics and registers them with reg (if not nil).
func NewLifecycleMetrics(reg prometheus.Registerer) *LifecycleMetrics {
	m := &LifecycleMetrics{
		Items: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_reconciler_items_total",
			Help: "Reconciler items by work kind and outcome (claimed, completed, retried, skipped, failed)."}, []string{"kind", "outcome"}),
		Backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fencegate_reconciler_backlog",
			Help: "Items waiting per work kind, as of the last pass."}, []string{"kind"}),
		OldestUnknown: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_oldest_unknown_guard_seconds",
			Help: "Age of the oldest unknown attempt (guard), 0 if none."}),
		OldestAbandoned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_oldest_abandoned_upload_seconds",
			Help: "Age of the oldest abandoned multipart upload not yet aborted, 0 if none."}),
		ReservationsExpired: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_reservations_expired_total",
			Help: "Upload reservations this gateway's sweeper ended at their expiry (quota released)."}),
		ReservationSweeps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_reservation_sweep_actions_total",
			Help: "What this gateway's sweeper did at the store after ended reservations, by action (upload_aborted, bytes_deleted)."}, []string{"action"}),
	}
	if reg != nil {
		reg.MustRegister(m.Items, m.Backlog, m.OldestUnknown, m.OldestAbandoned, m.ReservationsExpired, m.ReservationSweeps)
	}
	return m
}

func (m *LifecycleMetrics) count(kind string, c Counts) {
	for _, o := range []struct {
		name string
		n    int
	}{{"claimed", c.Claimed}, {"completed", c.Completed}, {"retried", c.Retried}, {"skipped", c.Skipped}, {"failed", c.Failed}} {
		if o.n > 0 {
			m.Items.WithLabelValues(kind, o.name).Add(float64(o.n))
		}
	}
}

// BacklogReader is implemented by drivers that can count the backlog
// (Catalog).
type BacklogReader interface {
	Backlog(ctx context.Context, uploadIdle, createSettle time.Duration) (Backlog, error)
}

func (s *Service) updateGauges(ctx context.Context) {
	br, ok := s.db.(BacklogReader)
	if !ok || ctx.Err() != nil {
		return
	}
	dctx, cancel := s.m.dbctx(ctx)
	defer cancel()
	b, err := br.Backlog(dctx, s.cfg.UploadIdle, s.cfg.UploadCreateSettle)
	if err != nil {
		return
	}
	s.Metrics.Backlog.WithLabelValues(KindUnresolved).Set(float64(b.Unresolved))
	s.Metrics.Backlog.WithLabelValues(KindUploads).Set(float64(b.AbandonedUploads + b.UnboundUploads))
	s.Metrics.Backlog.WithLabelValues(KindAudit).Set(float64(b.AuditBuckets))
	s.Metrics.OldestUnknown.Set(b.OldestUnknown.Seconds())
	s.Metrics.OldestAbandoned.Set(b.OldestAbandoned.Seconds())
}
