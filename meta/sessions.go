package meta

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/lease"
)

// Gateway sessions (migrations/0006_gateway_sessions.sql): each gateway
// process keeps one alive with a heartbeat on PostgreSQL's clock; a key lease
// is live only while its session is.

// sessionsKept is how long ended and expired sessions stay listed before a
// new session prunes them. A lease that still names a pruned session counts
// as dead, as it would have anyway.
const sessionsKept = "7 days"

// sessionLive is the liveness rule for a sessions row aliased s: not ended,
// its expiry ahead on PostgreSQL's clock. fencegate_lease_live applies the
// same rule to a lease's session (migrations/0006_gateway_sessions.sql).
const sessionLive = `(s.ended_at IS NULL AND s.expires_at > clock_timestamp())`

// OpenSession starts a session for gateway, alive for timeout unless
// extended, and returns its id.
func (c *Catalog) OpenSession(ctx context.Context, gateway string, timeout time.Duration) (string, error) {
	id := lease.NewID()
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO sessions (session_id, gateway, expires_at) VALUES ($1, $2, clock_timestamp() + $3::interval)`,
		id, gateway, timeout.String())
	b.Queue(`DELETE FROM sessions WHERE coalesce(ended_at, expires_at) < clock_timestamp() - $1::interval`, sessionsKept)
	if err := c.Pool.SendBatch(ctx, b).Close(); err != nil {
		return "", err
	}
	return id, nil
}

// Heartbeat extends a live session to timeout from now. alive is false when
// the session is dead (ended, or expired: a dead session is never revived,
// since its keys may be others' by now). live counts the sessions alive.
func (c *Catalog) Heartbeat(ctx context.Context, id string, timeout time.Duration) (alive bool, live int, err error) {
	err = c.Pool.QueryRow(ctx, `WITH beat AS (
			UPDATE sessions s SET heartbeat_at = clock_timestamp(), expires_at = clock_timestamp() + $2::interval
			WHERE session_id = $1 AND `+sessionLive+` RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM beat),
			(SELECT count(*) FROM sessions s WHERE `+sessionLive+`)`,
		id, timeout.String()).Scan(&alive, &live)
	return alive, live, err
}

// EndSession ends a session: every lease it holds is free at once.
func (c *Catalog) EndSession(ctx context.Context, id string) error {
	_, err := c.Pool.Exec(ctx, `UPDATE sessions SET ended_at = clock_timestamp() WHERE session_id = $1 AND ended_at IS NULL`, id)
	return err
}

// SessionInfo is a gateway session and the key leases that name it.
type SessionInfo struct {
	ID          string         `json:"id"`
	Gateway     string         `json:"gateway"`
	StartedAt   time.Time      `json:"started_at"`
	HeartbeatAt time.Time      `json:"heartbeat_at"`
	ExpiresAt   time.Time      `json:"expires_at"`
	EndedAt     *time.Time     `json:"ended_at"`
	Alive       bool           `json:"alive"`
	Leases      []SessionLease `json:"leases"`
}

// SessionLease is a key lease held under a session; Live applies the whole
// liveness rule (its own expiry and its session's).
type SessionLease struct {
	Bucket    string    `json:"bucket"`
	Key       string    `json:"key"`
	Holder    string    `json:"holder"`
	ExpiresAt time.Time `json:"expires_at"`
	Live      bool      `json:"live"`
}

// Sessions lists the sessions that are alive or still named by a held lease,
// oldest first, each with its leases (for `fencegate status`).
func (c *Catalog) Sessions(ctx context.Context) ([]SessionInfo, error) {
	rows, err := c.Pool.Query(ctx, `SELECT s.session_id::text, s.gateway, s.started_at, s.heartbeat_at, s.expires_at, s.ended_at,
			`+sessionLive+`,
			l.bucket, l.key, l.holder::text, l.expires_at, fencegate_lease_live(l.holder, l.expires_at, l.session)
		FROM sessions s LEFT JOIN leases l ON l.session = s.session_id AND l.holder IS NOT NULL
		WHERE `+sessionLive+` OR l.holder IS NOT NULL
		ORDER BY s.started_at, s.session_id, l.bucket, l.key`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SessionInfo
	for rows.Next() {
		var s SessionInfo
		var bucket, key, holder *string
		var expires *time.Time
		var live *bool
		if err := rows.Scan(&s.ID, &s.Gateway, &s.StartedAt, &s.HeartbeatAt, &s.ExpiresAt, &s.EndedAt, &s.Alive,
			&bucket, &key, &holder, &expires, &live); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].ID != s.ID {
			out = append(out, s)
		}
		if holder != nil {
			cur := &out[len(out)-1]
			cur.Leases = append(cur.Leases, SessionLease{Bucket: deref(bucket), Key: deref(key), Holder: *holder,
				ExpiresAt: *expires, Live: live != nil && *live})
		}
	}
	return out, rows.Err()
}
