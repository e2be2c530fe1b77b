package lease

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts the protocol's events.
type Metrics struct {
	Acquired prometheus.Counter
	Waited   prometheus.Counter
	Refused  *prometheus.CounterVec // reason: conflict (409), busy (503), no_session (503)
	Lost     prometheus.Counter
	// Held is how many of this gateway's writes hold a key lease now
	// (Manager.HeldLeases): each is at the store or about to commit.
	Held    prometheus.Gauge
	Commits prometheus.Counter
	Unknown prometheus.Counter
	// ReleaseRetries: releases PostgreSQL did not take, tried again in the
	// background (held.go), by outcome: released, or expired (given up once
	// the lease had run out anyway).
	ReleaseRetries *prometheus.CounterVec
	Settlements    *prometheus.CounterVec // kind: adopted, external, deleted_external, deleted_adopted, in_sync

	// Gateway sessions.
	SessionUp            prometheus.Gauge   // 1 while this gateway's session is alive (by its local deadline)
	SessionsAlive        prometheus.Gauge   // sessions alive on the database, as of the last heartbeat
	SessionsLost         prometheus.Counter // this gateway's session lost (local deadline passed, or found dead)
	SessionTakeovers     prometheus.Counter // key leases taken from holders whose session was dead
	SessionTakeoverDelay prometheus.Histogram

	// Waiting writers and the release listener (handover.go, wakeups.go).
	Wakeups       *prometheus.CounterVec // source: handover, queue, notify, listener, poll
	ListenerUp    prometheus.Gauge       // 1 while the release listener is subscribed
	ListenerLost  prometheus.Counter     // the release listener's subscription lost
	Notifications prometheus.Counter     // release notifications received
}

// NewMetrics makes the counters and registers them with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Acquired: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_leases_acquired_total", Help: "Key leases acquired."}),
		Waited:   prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_leases_waited_total", Help: "Leases acquired after waiting for another writer."}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_leases_refused_total",
			Help: "Lease requests refused: conflict (409, the writer had its own condition), busy (503 after the bounded wait) or no_session (503, this gateway's session is down)."}, []string{"reason"}),
		Lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_leases_lost_total", Help: "Leases lost while held (renewal failed or local deadline passed)."}),
		Held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_leases_held",
			Help: "Key leases this gateway's writes hold now: each write is at the store or about to commit (at 8 or more, group commit waits for their commits)."}),
		Commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_commits_total", Help: "Generations committed by their writer."}),
		Unknown: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_unknown_outcomes_total", Help: "Writes whose outcome is unknown (kept as guards)."}),
		ReleaseRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_lease_release_retries_total",
			Help: "Lease releases that failed (PostgreSQL unreachable) and were tried again in the background, by how that ended: released (the key was freed early) or expired (given up when the lease's TTL had run out)."}, []string{"outcome"}),
		Settlements: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_settlements_total",
			Help: "Keys settled before a write or by the reconciler, by what was found."}, []string{"kind"}),
		SessionUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_session_up",
			Help: "1 while this gateway's session is alive by its local deadline (it takes writes), else 0."}),
		SessionsAlive: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_sessions_alive",
			Help: "Gateway sessions alive on the database, as of this gateway's last heartbeat."}),
		SessionsLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_sessions_lost_total",
			Help: "Times this gateway's session was lost (heartbeats failed past the local deadline, or the session was found dead)."}),
		SessionTakeovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_session_takeovers_total",
			Help: "Key leases taken over from holders whose gateway session was dead."}),
		SessionTakeoverDelay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fencegate_session_takeover_seconds",
			Help:    "Time from a dead holder's last sign of life (its session's last heartbeat, or its end) to the takeover of its key, on the database clock.",
			Buckets: []float64{0.5, 1, 2, 5, 8, 10, 12, 15, 20, 30, 60, 120}}),
		Wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_lease_wakeups_total",
			Help: "Times a writer waiting for a key tried for it again, by what made it: handover (released in this gateway), queue (the writer ahead of it left), notify (released in another gateway, announced by PostgreSQL), listener (the release listener was lost or regained), poll (its poll came round)."}, []string{"source"}),
		ListenerUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_lease_listener_up",
			Help: "1 while this gateway's release listener is subscribed (waiters are woken by releases in other gateways and poll slowly), else 0 (they poll fast)."}),
		ListenerLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_lease_listener_lost_total",
			Help: "Times the release listener's connection was lost (it reconnects with backoff)."}),
		Notifications: prometheus.NewCounter(prometheus.CounterOpts{Name: "fencegate_lease_notifications_total",
			Help: "Release notifications the listener received (keys released elsewhere that a gateway's writers wait for)."}),
	}
	if reg != nil {
		m.Register(reg)
	}
	return m
}

// Register adds the counters to reg.
func (m *Metrics) Register(reg prometheus.Registerer) {
	reg.MustRegister(m.Acquired, m.Waited, m.Refused, m.Lost, m.Held, m.Commits, m.Unknown, m.ReleaseRetries, m.Settlements,
		m.SessionUp, m.SessionsAlive, m.SessionsLost, m.SessionTakeovers, m.SessionTakeoverDelay,
		m.Wakeups, m.ListenerUp, m.ListenerLost, m.Notifications)
}
