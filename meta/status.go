package meta

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lease"
)

// Backlog counts the reconciler's backlog; uploadIdle is the abandoned age,
// createSettle the delay before an unrecorded Create's upload is looked for.
func (c *Catalog) Backlog(ctx context.Context, uploadIdle, createSettle time.Duration) (lease.Backlog, error) {
	var b lease.Backlog
	var oldUnknown, oldAbandoned float64
	err := c.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM attempts a WHERE op <> 'multipart' AND (state = 'unknown' OR (state = 'leased' AND `+holderGone+`))),
		(SELECT count(*) FROM attempts WHERE op = 'multipart' AND state = 'open' AND upload_id IS NOT NULL
			AND greatest(updated_at, coalesce(activity_at, updated_at)) < clock_timestamp() - $1::interval),
		(SELECT count(*) FROM audit_cursors),
		(SELECT count(*) FROM attempts a WHERE `+unboundWhere+` AND a.updated_at < clock_timestamp() - $2::interval),
		coalesce((SELECT extract(epoch FROM clock_timestamp() - min(coalesce(unknown_at, updated_at))) FROM attempts WHERE state = 'unknown' AND op <> 'multipart'), 0),
		coalesce((SELECT extract(epoch FROM clock_timestamp() - min(greatest(updated_at, coalesce(activity_at, updated_at))) - $1::interval)
			FROM attempts WHERE op = 'multipart' AND state = 'open' AND upload_id IS NOT NULL
			AND greatest(updated_at, coalesce(activity_at, updated_at)) < clock_timestamp() - $1::interval), 0)`,
		uploadIdle.String(), createSettle.String()).Scan(&b.Unresolved, &b.AbandonedUploads, &b.AuditBuckets, &b.UnboundUploads,
		&oldUnknown, &oldAbandoned)
	b.OldestUnknown = time.Duration(oldUnknown * float64(time.Second))
	b.OldestAbandoned = time.Duration(oldAbandoned * float64(time.Second))
	return b, err
}

// Status is what `fencegate status` shows.
type Status struct {
	// LeasesHeld counts live leases per gateway ("settler" for leases held
	// by a reconciler or an import, which record no attempt).
	LeasesHeld map[string]int `json:"leases_held"`
	// Sessions are the gateway sessions alive or still named by a held
	// lease, each with its leases.
	Sessions      []SessionInfo `json:"sessions"`
	UnknownGuards struct {
		Count         int     `json:"count"`
		OldestSeconds float64 `json:"oldest_seconds"`
	} `json:"unknown_guards"`
	Uploads struct {
		Open                   int     `json:"open"`      // fencegate's, not completed or aborted
		Abandoned              int     `json:"abandoned"` // of those, idle past the abandoned age
		OldestAbandonedSeconds float64 `json:"oldest_abandoned_seconds"`
		// Unknown: Creates whose upload id is not recorded: the answer was
		// lost (unknown), or its id could not be recorded (open without one,
		// past the settle delay); the uploads kind binds or fails them.
		Unknown int `json:"unknown"`
		Foreign int `json:"foreign"` // found at the store, not created through fencegate, not aborted
	} `json:"multipart_uploads"`
	Backlog map[string]int `json:"reconciler_backlog"`
	Passes  []PassStatus   `json:"last_passes"`
	Outbox  struct {
		Rows      int64 `json:"rows"`
		Consumers int   `json:"consumers"`
		// Backlog: rows above the slowest consumer's acknowledgement (all
		// rows when no consumer is registered).
		Backlog int64 `json:"backlog"`
	} `json:"outbox"`
	// Notifications: each event notification target's queue, dead letters
	// and lag (docs/NOTIFICATIONS.md).
	Notifications []TargetStatus `json:"notification_targets"`
	// Reservations counts upload reservations by state; SweepBacklog is
	// those the reservations kind has still to end (live past their expiry)
	// or to clean up after (ended, not swept).
	Reservations struct {
		ByState      map[string]int `json:"by_state"`
		SweepBacklog int            `json:"sweep_backlog"`
	} `json:"reservations"`
}

// TargetStatus is one notification target's backlog.
type TargetStatus struct {
	Name        string  `json:"name"`
	ARN         string  `json:"arn"`
	Queued      int64   `json:"queued"`
	DeadLetters int64   `json:"dead_letters"`
	LagSeconds  float64 `json:"lag_seconds"`      // the oldest undelivered event's age
	Holder      string  `json:"holder,omitempty"` // the gateway session delivering it (claim live)
}

// PassStatus is a work kind's last pass on one gateway.
type PassStatus struct {
	Kind       string    `json:"kind"`
	Gateway    string    `json:"gateway"`
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
	Batches    int       `json:"batches"`
	Claimed    int       `json:"claimed"`
	Completed  int       `json:"completed"`
	Retried    int       `json:"retried"`
	Skipped    int       `json:"skipped"`
	Failed     int       `json:"failed"`
}

// ReadStatus gathers the status; uploadIdle is the abandoned age,
// createSettle the delay before an unrecorded Create's upload is looked for.
func (c *Catalog) ReadStatus(ctx context.Context, uploadIdle, createSettle time.Duration) (Status, error) {
	var s Status
	s.LeasesHeld = map[string]int{}
	rows, err := c.Pool.Query(ctx, `SELECT coalesce(a.gateway, 'settler'), count(*) FROM leases l
		LEFT JOIN attempts a ON a.attempt_id = l.holder
		WHERE fencegate_lease_live(l.holder, l.expires_at, l.session) GROUP BY 1 ORDER BY 1`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var g string
		var n int
		if err := rows.Scan(&g, &n); err != nil {
			rows.Close()
			return s, err
		}
		s.LeasesHeld[g] = n
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	b, err := c.Backlog(ctx, uploadIdle, createSettle)
	if err != nil {
		return s, err
	}
	s.Backlog = map[string]int{"unresolved": b.Unresolved, "uploads": b.AbandonedUploads + b.UnboundUploads, "audit": b.AuditBuckets}
	s.Uploads.Abandoned = b.AbandonedUploads
	s.Uploads.OldestAbandonedSeconds = b.OldestAbandoned.Seconds()
	err = c.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM attempts WHERE state = 'unknown' AND op <> 'multipart'),
		coalesce((SELECT extract(epoch FROM clock_timestamp() - min(coalesce(unknown_at, updated_at))) FROM attempts WHERE state = 'unknown' AND op <> 'multipart'), 0),
		(SELECT count(*) FROM attempts WHERE op = 'multipart' AND state = 'open'),
		(SELECT count(*) FROM attempts a WHERE `+unboundWhere+` AND (a.state = 'unknown' OR a.updated_at < clock_timestamp() - $1::interval)),
		(SELECT count(*) FROM foreign_uploads WHERE aborted_at IS NULL),
		(SELECT count(*) FROM outbox),
		(SELECT count(*) FROM outbox_consumers),
		(SELECT count(*) FROM outbox WHERE id > coalesce((SELECT min(acked_id) FROM outbox_consumers), 0))`, createSettle.String()).Scan(
		&s.UnknownGuards.Count, &s.UnknownGuards.OldestSeconds, &s.Uploads.Open, &s.Uploads.Unknown, &s.Uploads.Foreign,
		&s.Outbox.Rows, &s.Outbox.Consumers, &s.Outbox.Backlog)
	if err != nil {
		return s, err
	}
	prow, err := c.Pool.Query(ctx, `SELECT kind, gateway, started_at, duration_ms, batches, claimed, completed, retried, skipped, failed
		FROM reconciler_passes ORDER BY kind, gateway`)
	if err != nil {
		return s, err
	}
	s.Passes, err = pgx.CollectRows(prow, func(r pgx.CollectableRow) (PassStatus, error) {
		var p PassStatus
		err := r.Scan(&p.Kind, &p.Gateway, &p.StartedAt, &p.DurationMS, &p.Batches, &p.Claimed, &p.Completed, &p.Retried, &p.Skipped, &p.Failed)
		return p, err
	})
	if err != nil {
		return s, err
	}
	if err := c.reservationStatus(ctx, &s); err != nil {
		return s, err
	}
	s.Sessions, err = c.Sessions(ctx)
	if err != nil {
		return s, err
	}
	trow, err := c.Pool.Query(ctx, `SELECT t.name, t.kind,
		(SELECT count(*) FROM notify_queue q WHERE q.target = t.name),
		(SELECT count(*) FROM notify_dead_letters d WHERE d.target = t.name),
		coalesce((SELECT extract(epoch FROM clock_timestamp() - min(committed_at)) FROM notify_queue q WHERE q.target = t.name), 0),
		coalesce((SELECT holder::text FROM notify_claims c WHERE c.target = t.name AND NOT `+targetClaimFree+`), '')
		FROM notify_targets t ORDER BY t.name`)
	if err != nil {
		return s, err
	}
	s.Notifications, err = pgx.CollectRows(trow, func(r pgx.CollectableRow) (TargetStatus, error) {
		var ts TargetStatus
		var kind string
		err := r.Scan(&ts.Name, &kind, &ts.Queued, &ts.DeadLetters, &ts.LagSeconds, &ts.Holder)
		ts.ARN = TargetARN(ts.Name, kind)
		return ts, err
	})
	return s, err
}

func (c *Catalog) reservationStatus(ctx context.Context, s *Status) error {
	s.Reservations.ByState = map[string]int{}
	rows, err := c.Pool.Query(ctx, `SELECT state, count(*) FROM reservations GROUP BY state`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			rows.Close()
			return err
		}
		s.Reservations.ByState[st] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return c.Pool.QueryRow(ctx, `SELECT count(*) FROM reservations
		WHERE state = 'reserved' AND expires_at <= clock_timestamp()
		   OR state IN ('expired', 'cancelled') AND swept_at IS NULL`).Scan(&s.Reservations.SweepBacklog)
}
