package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/internal/notify"
	"github.com/fencegate/fencegate/meta"
)

// defineNotify adds the event delivery flags (docs/NOTIFICATIONS.md).
func (c *serveConfig) defineNotify(f envFlags) {
	n := &c.Notify
	f.Bool(&c.NotifyOff, "notify-off", "FENCEGATE_NOTIFY_OFF", false, "deliver no event notifications from this gateway (others holding the targets' claims still do)")
	f.Int(&n.MaxTries, "notify-max-tries", "FENCEGATE_NOTIFY_MAX_TRIES", 10, "failed tries after which an event becomes a dead letter (fencegate targets redrive sends it again)")
	f.Duration(&n.MaxAge, "notify-max-age", "FENCEGATE_NOTIFY_MAX_AGE", 0, "an event this old (since its commit) whose try fails becomes a dead letter whatever its tries (0: no limit)")
	f.Duration(&n.RetryBase, "notify-retry", "FENCEGATE_NOTIFY_RETRY", 500*time.Millisecond, "first back-off after a failed try; doubles per try, with jitter")
	f.Duration(&n.RetryMax, "notify-retry-max", "FENCEGATE_NOTIFY_RETRY_MAX", time.Minute, "longest back-off between tries")
	f.Duration(&n.Timeout, "notify-timeout", "FENCEGATE_NOTIFY_TIMEOUT", 10*time.Second, "one webhook POST or NATS publish; longer is a failed try")
	f.Duration(&n.ClaimFor, "notify-claim", "FENCEGATE_NOTIFY_CLAIM", 15*time.Second, "a target's delivery claim lasts this long unless renewed; another gateway takes the target over after it, or once the holder's session has expired")
	f.Duration(&n.Poll, "notify-poll", "FENCEGATE_NOTIFY_POLL", 500*time.Millisecond, "how often an idle target's queue is read again")
	f.Int(&n.Parallel, "notify-parallel", "FENCEGATE_NOTIFY_PARALLEL", 16, "keys of one target delivered at once (each key's events in order)")
}

// startNotify runs the delivery service as holder until ctx ends; the
// returned func waits for it.
func startNotify(ctx context.Context, c serveConfig, pool *pgxpool.Pool, sealer *meta.Sealer, holder func() string,
	reg prometheus.Registerer, log *slog.Logger) func() {
	if c.NotifyOff {
		return func() {}
	}
	svc := notify.NewService(c.Notify, &meta.Targets{Pool: pool, Sealer: sealer}, holder, log)
	svc.Metrics = notify.NewMetrics(reg)
	svc.Start(ctx)
	return svc.Wait
}
