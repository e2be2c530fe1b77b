package lease

import "context"

// Wakeups is where a gateway hears of releases in other gateways
// (meta.Catalog: PostgreSQL LISTEN/NOTIFY, migrations/0008_release_wakeups.sql).
// A writer that waits for a key marks the key's lease row as it finds it
// held; the release of a marked row sends the key's hash (meta.KeyHash) on
// a notification, in the releasing transaction. So once the listener is
// subscribed, a release committed after a waiter's refused attempt is
// always announced to it: the waiter's queue head is woken at once, and
// polls only as a slow fallback (Config.WaitPollListening).
type Wakeups interface {
	// ListenReleases runs until ctx ends, reconnecting as needed. It calls
	// listening(true) once its subscription is in place (again after each
	// reconnect), listening(false) when it is lost, and released(hash) for
	// each release announced while subscribed, from one goroutine, in
	// order; the callbacks do not block.
	ListenReleases(ctx context.Context, listening func(up bool), released func(keyHash string)) error
}

// ListenForReleases runs w's listener for this Manager until ctx ends (run
// it in a goroutine of its own). While the listener is subscribed, waiting
// writers mark the keys they wait for and their queue heads poll every
// WaitPollListening; while it is not (before it first subscribes, after it
// is lost) they poll every WaitPoll, and marking stops.
func (m *Manager) ListenForReleases(ctx context.Context, w Wakeups) error {
	// The queues first, then the metrics: a metric seen means the queues
	// have it.
	return w.ListenReleases(ctx, func(up bool) {
		m.queues.setListening(up)
		if up {
			m.Metrics.ListenerUp.Set(1)
		} else {
			m.Metrics.ListenerUp.Set(0)
			if ctx.Err() == nil {
				m.Metrics.ListenerLost.Inc()
			}
		}
	}, func(keyHash string) {
		m.queues.notified(keyHash)
		m.Metrics.Notifications.Inc()
	})
}
