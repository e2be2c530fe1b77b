package meta

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// The web console's reads of one bucket and one key (internal/console).
// Each is a few short reads; none takes a lease or writes.

// ErrNoBucket: the catalog has no row for the bucket.
var ErrNoBucket = errors.New("no such bucket in the catalog")

// BucketSummary is one bucket as the console's bucket list shows it.
type BucketSummary struct {
	Bucket    string    `json:"bucket"`
	Complete  bool      `json:"complete"`
	CreatedAt time.Time `json:"created_at"`
	Keys      int64     `json:"keys"`
	Bytes     int64     `json:"bytes"`
}

// AuditCursor is where the incremental audit stands in a bucket: the store
// listing's position in the current round, the rounds finished, when it last
// audited a page (PassedAt), when the next page may be audited (ClaimedUntil:
// a claim or the rest after a page), and the last failure. The catalog keeps no findings:
// what the audit found is repaired through the settle path and shows as
// adopted or external generations.
type AuditCursor struct {
	Marker       string     `json:"marker"`
	AfterKey     string     `json:"after_key"`
	UploadKey    string     `json:"upload_key"`
	Rounds       int        `json:"rounds"`
	PassedAt     *time.Time `json:"passed_at"`
	ClaimedUntil *time.Time `json:"claimed_until"`
	Tries        int        `json:"tries"`
	LastError    string     `json:"last_error,omitempty"`
}

// Generation is one recorded generation of a key.
type Generation struct {
	Bucket      string    `json:"bucket"`
	Key         string    `json:"key"`
	Generation  int64     `json:"generation"`
	ETag        string    `json:"etag"`
	Size        *int64    `json:"size"`
	Deleted     bool      `json:"deleted"`
	Origin      string    `json:"origin"`
	AttemptID   string    `json:"attempt_id,omitempty"`
	CommittedAt time.Time `json:"committed_at"`
}

// BucketView is the console's bucket page.
type BucketView struct {
	BucketSummary
	// Audit is nil until the audit kind first claims a bucket (it then
	// keeps a cursor for every bucket).
	Audit *AuditCursor `json:"audit"`
	// Latest are the bucket's newest generations, newest first.
	Latest []Generation `json:"latest_generations"`
}

// Buckets lists every bucket the catalog knows with its live keys and bytes.
func (c *Catalog) Buckets(ctx context.Context) ([]BucketSummary, error) {
	rows, err := c.Pool.Query(ctx, `SELECT b.bucket, b.complete, b.created_at,
		(SELECT count(*) FROM catalog c WHERE c.bucket = b.bucket AND NOT c.deleted),
		(SELECT coalesce(sum(size), 0) FROM catalog c WHERE c.bucket = b.bucket AND NOT c.deleted)
		FROM buckets b ORDER BY b.bucket`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (BucketSummary, error) {
		var b BucketSummary
		err := r.Scan(&b.Bucket, &b.Complete, &b.CreatedAt, &b.Keys, &b.Bytes)
		return b, err
	})
}

// ReadBucketView reads a bucket's summary, audit cursor and its latest
// generations (at most limit). ErrNoBucket if the catalog has no such bucket.
func (c *Catalog) ReadBucketView(ctx context.Context, bucket string, limit int) (BucketView, error) {
	var v BucketView
	v.Bucket = bucket
	err := c.Pool.QueryRow(ctx, `SELECT b.complete, b.created_at,
		(SELECT count(*) FROM catalog c WHERE c.bucket = b.bucket AND NOT c.deleted),
		(SELECT coalesce(sum(size), 0) FROM catalog c WHERE c.bucket = b.bucket AND NOT c.deleted)
		FROM buckets b WHERE b.bucket = $1`, bucket).Scan(&v.Complete, &v.CreatedAt, &v.Keys, &v.Bytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return v, ErrNoBucket
	}
	if err != nil {
		return v, err
	}
	var a AuditCursor
	var lastError *string
	err = c.Pool.QueryRow(ctx, `SELECT marker, after_key, upload_key, rounds, passed_at, claimed_until, tries, last_error
		FROM audit_cursors WHERE bucket = $1`, bucket).Scan(&a.Marker, &a.AfterKey, &a.UploadKey, &a.Rounds, &a.PassedAt, &a.ClaimedUntil, &a.Tries, &lastError)
	switch {
	case err == nil:
		if lastError != nil {
			a.LastError = *lastError
		}
		v.Audit = &a
	case !errors.Is(err, pgx.ErrNoRows):
		return v, err
	}
	rows, err := c.Pool.Query(ctx, `SELECT `+generationColumns+` FROM generations
		WHERE bucket = $1 ORDER BY committed_at DESC, generation DESC LIMIT $2`, bucket, limit)
	if err != nil {
		return v, err
	}
	v.Latest, err = pgx.CollectRows(rows, scanGeneration)
	return v, err
}

const generationColumns = `bucket, key, generation, coalesce(etag, ''), size, deleted, origin, coalesce(attempt_id::text, ''), committed_at`

func scanGeneration(r pgx.CollectableRow) (Generation, error) {
	var g Generation
	err := r.Scan(&g.Bucket, &g.Key, &g.Generation, &g.ETag, &g.Size, &g.Deleted, &g.Origin, &g.AttemptID, &g.CommittedAt)
	return g, err
}

// AttemptRecord is one write attempt on a key as the console shows it.
type AttemptRecord struct {
	ID        string    `json:"attempt_id"`
	Op        string    `json:"op"`
	State     string    `json:"state"`
	Gateway   string    `json:"gateway"`
	Size      *int64    `json:"declared_size"`
	ETag      string    `json:"etag,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	Tries     int       `json:"tries"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Generation is the generation it committed or was adopted as (0: none).
	Generation int64 `json:"generation,omitempty"`
}

// GenerationHistory is a generation with the attempts that led to it: the
// one that made it, and those that ended without a generation between the
// previous generation and this one.
type GenerationHistory struct {
	Generation
	Attempts []AttemptRecord `json:"attempts"`
}

// KeyHistory is every recorded generation of a key, newest first, each with
// its attempts; Pending are attempts made after the newest generation that
// made none (in flight, unknown, failed).
type KeyHistory struct {
	Bucket      string              `json:"bucket"`
	Key         string              `json:"key"`
	Generations []GenerationHistory `json:"generations"`
	Pending     []AttemptRecord     `json:"pending_attempts"`
}

// ReadKeyHistory reads a key's generations and attempts.
func (c *Catalog) ReadKeyHistory(ctx context.Context, bucket, key string) (KeyHistory, error) {
	h := KeyHistory{Bucket: bucket, Key: key, Generations: []GenerationHistory{}, Pending: []AttemptRecord{}}
	rows, err := c.Pool.Query(ctx, `SELECT `+generationColumns+` FROM generations
		WHERE bucket = $1 AND key = $2 ORDER BY generation`, bucket, key)
	if err != nil {
		return h, err
	}
	gens, err := pgx.CollectRows(rows, scanGeneration)
	if err != nil {
		return h, err
	}
	rows, err = c.Pool.Query(ctx, `SELECT attempt_id::text, op, state, gateway, declared_size, coalesce(etag, ''),
		coalesce(reason, ''), coalesce(last_error, ''), tries, created_at, updated_at, coalesce(generation, 0)
		FROM attempts WHERE bucket = $1 AND key = $2 ORDER BY created_at, attempt_id`, bucket, key)
	if err != nil {
		return h, err
	}
	attempts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AttemptRecord, error) {
		var a AttemptRecord
		err := r.Scan(&a.ID, &a.Op, &a.State, &a.Gateway, &a.Size, &a.ETag, &a.Reason, &a.LastError, &a.Tries,
			&a.CreatedAt, &a.UpdatedAt, &a.Generation)
		return a, err
	})
	if err != nil {
		return h, err
	}
	byGen := map[int64]int{}
	hist := make([]GenerationHistory, len(gens))
	for i, g := range gens {
		hist[i] = GenerationHistory{Generation: g, Attempts: []AttemptRecord{}}
		byGen[g.Generation] = i
	}
	for _, a := range attempts {
		if i, ok := byGen[a.Generation]; ok && a.Generation != 0 {
			hist[i].Attempts = append(hist[i].Attempts, a)
			continue
		}
		// No generation of its own: it belongs to the first generation
		// committed after it began, or is still pending.
		placed := false
		for i := range hist {
			if hist[i].CommittedAt.After(a.CreatedAt) {
				hist[i].Attempts = append(hist[i].Attempts, a)
				placed = true
				break
			}
		}
		if !placed {
			h.Pending = append(h.Pending, a)
		}
	}
	for i := len(hist) - 1; i >= 0; i-- {
		h.Generations = append(h.Generations, hist[i])
	}
	return h, nil
}
