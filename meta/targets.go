package meta

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Target kinds.
const (
	TargetWebhook = "webhook"
	TargetNATS    = "nats"
)

// Target is a delivery target of event notifications (docs/NOTIFICATIONS.md),
// with its secret opened.
type Target struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	URL       string    `json:"url"`
	Subject   string    `json:"subject,omitempty"`
	Secret    string    `json:"-"`
	HasSecret bool      `json:"has_secret"` // sealed in the catalog (Secret is opened only with a Sealer)
	CreatedAt time.Time `json:"created_at"`
}

// ARN is what a bucket's notification configuration names the target by.
func (t Target) ARN() string { return TargetARN(t.Name, t.Kind) }

// TargetARN is the one ARN form: arn:fencegate:sqs::NAME:KIND.
func TargetARN(name, kind string) string { return "arn:fencegate:sqs::" + name + ":" + kind }

// ParseTargetARN splits an ARN of TargetARN's form.
func ParseTargetARN(arn string) (name, kind string, ok bool) {
	p := strings.Split(arn, ":")
	if len(p) != 6 || p[0] != "arn" || p[1] != "fencegate" || p[2] != "sqs" || p[3] != "" || p[4] == "" {
		return "", "", false
	}
	return p[4], p[5], p[5] == TargetWebhook || p[5] == TargetNATS
}

var targetName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

var (
	ErrNoSuchTarget  = errors.New("no such target")
	ErrTargetExists  = errors.New("a target of that name exists")
	ErrTargetInUse   = errors.New("the target is named by a bucket's notification configuration")
	errTargetInvalid = errors.New("target name: 1 to 64 letters, digits, '-' or '_'")
)

// Targets stores notification targets, their buckets' configurations and
// their delivery queues.
type Targets struct {
	Pool   *pgxpool.Pool
	Sealer *Sealer // opens webhook secrets; nil: secrets are neither sealed nor opened
}

func secretAD(name string) string { return "target:" + name }

// Add records a new target; a webhook's secret is sealed.
func (t *Targets) Add(ctx context.Context, tg Target) (Target, error) {
	if !targetName.MatchString(tg.Name) {
		return Target{}, errTargetInvalid
	}
	switch tg.Kind {
	case TargetWebhook:
		if !strings.HasPrefix(tg.URL, "http://") && !strings.HasPrefix(tg.URL, "https://") {
			return Target{}, errors.New("a webhook's --url must be http:// or https://")
		}
	case TargetNATS:
		if !strings.HasPrefix(tg.URL, "nats://") && !strings.HasPrefix(tg.URL, "tls://") {
			return Target{}, errors.New("a NATS target's --url must be nats:// or tls://")
		}
		if tg.Subject == "" {
			return Target{}, errors.New("a NATS target needs --subject")
		}
	default:
		return Target{}, fmt.Errorf("target kind %q: want webhook or nats", tg.Kind)
	}
	var sealed []byte
	if tg.Secret != "" {
		if t.Sealer == nil {
			return Target{}, errors.New("a secret needs the server key")
		}
		sealed = t.Sealer.Seal(secretAD(tg.Name), tg.Secret)
	}
	err := t.Pool.QueryRow(ctx, `INSERT INTO notify_targets (name, kind, url, subject, secret_sealed)
		VALUES ($1, $2, $3, $4, $5) RETURNING created_at`, tg.Name, tg.Kind, tg.URL, tg.Subject, sealed).Scan(&tg.CreatedAt)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return Target{}, fmt.Errorf("%w: %s", ErrTargetExists, tg.Name)
	}
	tg.HasSecret = sealed != nil
	return tg, err
}

// TargetCounts is a target's queue and dead-letter sizes.
type TargetCounts struct {
	Queued, DeadLetters int64
	// Lag: the age of its oldest undelivered event (0 when none).
	Lag time.Duration
}

// Counts gives every target's queue and dead letters.
func (t *Targets) Counts(ctx context.Context) (map[string]TargetCounts, error) {
	rows, err := t.Pool.Query(ctx, `SELECT t.name,
		(SELECT count(*) FROM notify_queue q WHERE q.target = t.name),
		(SELECT count(*) FROM notify_dead_letters d WHERE d.target = t.name),
		coalesce((SELECT extract(epoch FROM clock_timestamp() - min(committed_at)) FROM notify_queue q WHERE q.target = t.name), 0)
		FROM notify_targets t`)
	if err != nil {
		return nil, err
	}
	out := map[string]TargetCounts{}
	for rows.Next() {
		var name string
		var c TargetCounts
		var lag float64
		if err := rows.Scan(&name, &c.Queued, &c.DeadLetters, &lag); err != nil {
			return nil, err
		}
		c.Lag = time.Duration(lag * float64(time.Second))
		out[name] = c
	}
	return out, rows.Err()
}

// All lists the targets, secrets opened when a Sealer is set.
func (t *Targets) All(ctx context.Context) ([]Target, error) {
	rows, err := t.Pool.Query(ctx, `SELECT name, kind, url, subject, secret_sealed, created_at FROM notify_targets ORDER BY name`)
	if err != nil {
		return nil, err
	}
	var out []Target
	for rows.Next() {
		var tg Target
		var sealed []byte
		if err := rows.Scan(&tg.Name, &tg.Kind, &tg.URL, &tg.Subject, &sealed, &tg.CreatedAt); err != nil {
			return nil, err
		}
		tg.HasSecret = sealed != nil
		if sealed != nil && t.Sealer != nil {
			if tg.Secret, err = t.Sealer.Open(secretAD(tg.Name), sealed); err != nil {
				return nil, fmt.Errorf("target %s: %w", tg.Name, err)
			}
		}
		out = append(out, tg)
	}
	return out, rows.Err()
}

// Remove deletes a target no bucket names, with its queue and dead letters.
func (t *Targets) Remove(ctx context.Context, name string) error {
	return pgx.BeginFunc(ctx, t.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM notify_targets WHERE name = $1`, name)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23503" {
			return ErrTargetInUse
		}
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNoSuchTarget
		}
		for _, q := range []string{`DELETE FROM notify_queue WHERE target = $1`, `DELETE FROM notify_dead_letters WHERE target = $1`,
			`DELETE FROM notify_claims WHERE target = $1`} {
			if _, err := tx.Exec(ctx, q, name); err != nil {
				return err
			}
		}
		return nil
	})
}

// Redrive moves a target's dead letters back into its queue, due now and with
// their tries reset; it returns how many.
func (t *Targets) Redrive(ctx context.Context, name string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, t.Pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM notify_targets WHERE name = $1)`, name).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return ErrNoSuchTarget
		}
		// The dead letter keeps its id, so it takes its old place in its
		// key's order (ids are per key in generation order).
		tag, err := tx.Exec(ctx, `WITH d AS (DELETE FROM notify_dead_letters WHERE target = $1 RETURNING *)
			INSERT INTO notify_queue (id, target, outbox_id, event_name, bucket, key, generation, etag, size, attempt_id, committed_at, last_error)
			SELECT id, target, outbox_id, event_name, bucket, key, generation, etag, size, attempt_id, committed_at, last_error FROM d`, name)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// NotificationRule is one QueueConfiguration or TopicConfiguration of a
// bucket, its target named by ARN.
type NotificationRule struct {
	ID     string
	Kind   string // "queue" or "topic"
	ARN    string
	Events []string
	Prefix string
	Suffix string
}

// UnknownTargetsError lists ARNs a configuration names that are no target.
type UnknownTargetsError struct{ ARNs []string }

func (e *UnknownTargetsError) Error() string {
	return "unknown notification targets: " + strings.Join(e.ARNs, ", ")
}

// BucketNotifications reads a bucket's configuration, in document order.
func (t *Targets) BucketNotifications(ctx context.Context, bucket string) ([]NotificationRule, error) {
	rows, err := t.Pool.Query(ctx, `SELECT n.id, n.kind, n.target, t.kind, n.events, n.prefix, n.suffix
		FROM bucket_notifications n JOIN notify_targets t ON t.name = n.target
		WHERE n.bucket = $1 ORDER BY n.position`, bucket)
	if err != nil {
		return nil, err
	}
	var out []NotificationRule
	for rows.Next() {
		var r NotificationRule
		var name, kind string
		if err := rows.Scan(&r.ID, &r.Kind, &name, &kind, &r.Events, &r.Prefix, &r.Suffix); err != nil {
			return nil, err
		}
		r.ARN = TargetARN(name, kind)
		out = append(out, r)
	}
	return out, rows.Err()
}

// SetBucketNotifications replaces a bucket's configuration in one
// transaction: events committed after it are matched against the new rules.
// An ARN naming no target refuses the whole configuration
// (*UnknownTargetsError).
func (t *Targets) SetBucketNotifications(ctx context.Context, bucket string, rules []NotificationRule) error {
	return pgx.BeginFunc(ctx, t.Pool, func(tx pgx.Tx) error {
		var unknown []string
		names := make([]string, len(rules))
		for i, r := range rules {
			name, kind, ok := ParseTargetARN(r.ARN)
			if ok {
				var have string
				err := tx.QueryRow(ctx, `SELECT kind FROM notify_targets WHERE name = $1 FOR SHARE`, name).Scan(&have)
				if errors.Is(err, pgx.ErrNoRows) {
					ok = false
				} else if err != nil {
					return err
				}
				ok = ok && have == kind
			}
			if !ok {
				unknown = append(unknown, r.ARN)
			}
			names[i] = name
		}
		if len(unknown) > 0 {
			return &UnknownTargetsError{ARNs: unknown}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM bucket_notifications WHERE bucket = $1`, bucket); err != nil {
			return err
		}
		for i, r := range rules {
			if _, err := tx.Exec(ctx, `INSERT INTO bucket_notifications (bucket, position, id, kind, target, events, prefix, suffix)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, bucket, i, r.ID, r.Kind, names[i], r.Events, r.Prefix, r.Suffix); err != nil {
				return err
			}
		}
		return nil
	})
}
