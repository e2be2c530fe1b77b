package meta

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Reservation states (docs/RESERVATIONS.md).
const (
	ReservationReserved  = "reserved"
	ReservationCommitted = "committed"
	ReservationExpired   = "expired"
	ReservationCancelled = "cancelled"
	ReservationFailed    = "failed"
)

// Errors a reservation call answers with; each maps to one HTTP status.
var (
	ErrNoSuchReservation = errors.New("no such reservation")
	ErrIdempotencyReused = errors.New("idempotency key reused with a different request")
	ErrQuotaExceeded     = errors.New("quota exceeded")
	ErrNoSuchAccount     = errors.New("no such quota account")
	ErrKeyReserved       = errors.New("the key has a live reservation")
	ErrReservationEnded  = errors.New("the reservation is not live")
)

// ReservationRequest is what a reservation is made from. Its hash (every
// field but the id) tells a repeat of an idempotency key from a reuse.
type ReservationRequest struct {
	Bucket         string          `json:"bucket"`
	Key            string          `json:"key"`
	AccessKeyID    string          `json:"access_key_id"`
	Account        string          `json:"account,omitempty"`
	ExactSize      *int64          `json:"size,omitempty"`
	MaxSize        *int64          `json:"max_size,omitempty"`
	SHA256         string          `json:"sha256,omitempty"`
	CRC32C         string          `json:"crc32c,omitempty"`
	CRC64NVME      string          `json:"crc64nvme,omitempty"`
	ContentType    string          `json:"content_type,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	TTL            time.Duration   `json:"ttl"`
}

func (q ReservationRequest) hash() string {
	b, _ := json.Marshal(q)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Reservation is one reservation's row.
type Reservation struct {
	ID          string          `json:"id"`
	Bucket      string          `json:"bucket"`
	Key         string          `json:"key"`
	AccessKeyID string          `json:"access_key_id"`
	Account     string          `json:"account,omitempty"`
	ExactSize   *int64          `json:"expected_size,omitempty"`
	MaxSize     *int64          `json:"max_size,omitempty"`
	Reserved    int64           `json:"reserved_bytes"`
	SHA256      string          `json:"sha256,omitempty"`
	CRC32C      string          `json:"crc32c,omitempty"`
	CRC64NVME   string          `json:"crc64nvme,omitempty"`
	ContentType string          `json:"content_type,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	State       string          `json:"state"`
	ExpiresAt   time.Time       `json:"expires_at"`
	CreatedAt   time.Time       `json:"created_at"`
	EndedAt     *time.Time      `json:"ended_at,omitempty"`
	Size        *int64          `json:"size,omitempty"`
	ETag        string          `json:"etag,omitempty"`
	Generation  *int64          `json:"generation,omitempty"`
	// Made is true when Create made this reservation (false: an
	// idempotent repeat returned the one made before).
	Made bool `json:"-"`
}

// Reservations stores reservations and quotas.
type Reservations struct {
	Pool *pgxpool.Pool

	// Creates that come while one is in flight go together in the next
	// round trip, one transaction (batch.go; docs/COST.md, "What a
	// reservation costs"): an account's reservations all update its one
	// quota row, and one transaction takes it once for them all instead of
	// each queueing for it in turn. A batch that fails (a quota exceeded,
	// a key already reserved) is sent again one create at a time, so each
	// gets its own answer.
	creates     writeBatcher
	createsOnce sync.Once
}

const reservationColumns = `reservation_id::text, bucket, key, access_key_id, coalesce(account, ''), exact_size, max_size,
	reserved_bytes, coalesce(sha256, ''), coalesce(crc32c, ''), coalesce(crc64nvme, ''), content_type, metadata, state, expires_at, created_at, ended_at, size,
	coalesce(etag, ''), generation`

func scanReservation(row pgx.Row) (Reservation, error) {
	var r Reservation
	var md []byte
	err := row.Scan(&r.ID, &r.Bucket, &r.Key, &r.AccessKeyID, &r.Account, &r.ExactSize, &r.MaxSize, &r.Reserved,
		&r.SHA256, &r.CRC32C, &r.CRC64NVME, &r.ContentType, &md, &r.State, &r.ExpiresAt, &r.CreatedAt, &r.EndedAt, &r.Size, &r.ETag, &r.Generation)
	if len(md) > 0 {
		r.Metadata = md
	}
	return r, err
}

// newUUID is a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// reservationError maps the reservation functions' raised errors (by their
// HINT) to this package's errors.
func reservationError(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Hint {
	case "fencegate:idempotency":
		return ErrIdempotencyReused
	case "fencegate:quota":
		return ErrQuotaExceeded
	case "fencegate:no-account":
		return ErrNoSuchAccount
	case "fencegate:key-reserved":
		return ErrKeyReserved
	}
	return err
}

// Create makes a reservation (or returns the one its idempotency key made for
// the same request), holding its bytes in its account's quota.
func (s *Reservations) Create(ctx context.Context, q ReservationRequest) (Reservation, error) {
	if q.ExactSize != nil && q.MaxSize != nil {
		return Reservation{}, errors.New("a reservation has an exact size or a maximum, not both")
	}
	var account, idem *string
	if q.Account != "" {
		account = &q.Account
	}
	if q.IdempotencyKey != "" {
		idem = &q.IdempotencyKey
	}
	var md []byte
	if len(q.Metadata) > 0 {
		md = q.Metadata
	}
	id := newUUID()
	s.createsOnce.Do(func() { s.creates.pool = s.Pool })
	var r Reservation
	err := s.creates.call(ctx, &batchedCall{bucket: q.Bucket, key: q.Key, queue: func(b *pgx.Batch) {
		r = Reservation{}
		b.Queue(`SELECT `+reservationColumns+` FROM fencegate_reserve($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15::interval)`,
			id, q.Bucket, q.Key, q.AccessKeyID, account, q.ExactSize, q.MaxSize, nullString(q.SHA256), nullString(q.CRC32C),
			nullString(q.CRC64NVME), q.ContentType, md, idem, q.hash(), q.TTL.String()).
			QueryRow(func(row pgx.Row) (err error) { r, err = scanReservation(row); return })
	}})
	r.Made = err == nil && r.ID == id
	return r, reservationError(err)
}

// Get reads one reservation.
func (s *Reservations) Get(ctx context.Context, id string) (Reservation, error) {
	if !validUUID(id) {
		return Reservation{}, ErrNoSuchReservation
	}
	r, err := scanReservation(s.Pool.QueryRow(ctx, `SELECT `+reservationColumns+` FROM reservations WHERE reservation_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNoSuchReservation
	}
	return r, err
}

// Live is the key's live reservation, if any (ok false: none).
func (s *Reservations) Live(ctx context.Context, bucket, key string) (r Reservation, ok bool, err error) {
	r, err = scanReservation(s.Pool.QueryRow(ctx, `SELECT `+reservationColumns+` FROM reservations
		WHERE bucket = $1 AND key = $2 AND state = 'reserved'`, bucket, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// LiveBuckets lists the buckets that have a live reservation now.
func (s *Reservations) LiveBuckets(ctx context.Context) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT bucket FROM reservations WHERE state = 'reserved'`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// List lists a bucket's reservations, newest first (at most limit).
func (s *Reservations) List(ctx context.Context, bucket string, limit int) ([]Reservation, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+reservationColumns+` FROM reservations WHERE bucket = $1
		ORDER BY created_at DESC LIMIT $2`, bucket, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Reservation
	for rows.Next() {
		r, err := scanReservation(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// End claims a live reservation and ends it (cancelled, or expired when its
// expiry passed), releasing its quota. ErrReservationEnded: it was not live;
// the returned row is its current state.
func (s *Reservations) End(ctx context.Context, id, state string) (Reservation, error) {
	if !validUUID(id) {
		return Reservation{}, ErrNoSuchReservation
	}
	var ended *string
	err := s.Pool.QueryRow(ctx, `SELECT (fencegate_reservation_end($1, $2, $3)).reservation_id::text`,
		id, state, state == ReservationExpired).Scan(&ended)
	if err != nil {
		return Reservation{}, err
	}
	r, err := s.Get(ctx, id)
	if err == nil && ended == nil {
		err = ErrReservationEnded
	}
	return r, err
}

// Bind records that attempt writes under reservation id at bucket/key, before
// any of its bytes reach the store; false when the reservation is not live.
func (s *Reservations) Bind(ctx context.Context, id, attempt, bucket, key string) (bool, error) {
	if !validUUID(id) || !validUUID(attempt) {
		return false, nil
	}
	var ok bool
	err := s.Pool.QueryRow(ctx, `SELECT fencegate_reservation_bind($1, $2, $3, $4)`, id, attempt, bucket, key).Scan(&ok)
	return ok, err
}

// BoundTo is the reservation attempt was bound to ("", false when none): a
// multipart upload whose Create attempt is bound to a reservation is that
// reservation's.
func (s *Reservations) BoundTo(ctx context.Context, attempt string) (string, bool, error) {
	if !validUUID(attempt) {
		return "", false, nil
	}
	var id string
	err := s.Pool.QueryRow(ctx, `SELECT reservation_id::text FROM reservation_attempts WHERE attempt_id = $1`, attempt).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return id, err == nil, err
}

func validUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// Quota is one account's limit and what is reserved and used of it.
type Quota struct {
	Account         string `json:"account"`
	LimitBytes      int64  `json:"limit_bytes"`
	LimitObjects    *int64 `json:"limit_objects,omitempty"`
	ReservedBytes   int64  `json:"reserved_bytes"`
	UsedBytes       int64  `json:"used_bytes"`
	ReservedObjects int64  `json:"reserved_objects"`
	UsedObjects     int64  `json:"used_objects"`
}

// SetQuota creates an account or changes its limits (what is reserved and
// used stays).
func (s *Reservations) SetQuota(ctx context.Context, account string, limitBytes int64, limitObjects *int64) error {
	_, err := s.Pool.Exec(ctx, `INSERT INTO quotas (account, limit_bytes, limit_objects) VALUES ($1, $2, $3)
		ON CONFLICT (account) DO UPDATE SET limit_bytes = EXCLUDED.limit_bytes, limit_objects = EXCLUDED.limit_objects,
			updated_at = clock_timestamp()`, account, limitBytes, limitObjects)
	return err
}

const quotaColumns = `account, limit_bytes, limit_objects, reserved_bytes, used_bytes, reserved_objects, used_objects`

func scanQuota(row pgx.Row) (Quota, error) {
	var q Quota
	err := row.Scan(&q.Account, &q.LimitBytes, &q.LimitObjects, &q.ReservedBytes, &q.UsedBytes, &q.ReservedObjects, &q.UsedObjects)
	return q, err
}

// GetQuota reads one account.
func (s *Reservations) GetQuota(ctx context.Context, account string) (Quota, error) {
	q, err := scanQuota(s.Pool.QueryRow(ctx, `SELECT `+quotaColumns+` FROM quotas WHERE account = $1`, account))
	if errors.Is(err, pgx.ErrNoRows) {
		return q, ErrNoSuchAccount
	}
	return q, err
}

// Quotas lists every account.
func (s *Reservations) Quotas(ctx context.Context) ([]Quota, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+quotaColumns+` FROM quotas ORDER BY account`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Quota
	for rows.Next() {
		q, err := scanQuota(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// ReservationParam is the query parameter a PUT under a reservation carries
// (signed, in its presigned URL).
const ReservationParam = "x-fencegate-reservation"

// MaxReservationMetadata bounds a reservation's application metadata.
const MaxReservationMetadata = 4096

// ValidateReservation checks a request before it reaches the database.
func ValidateReservation(q ReservationRequest) error {
	switch {
	case q.Bucket == "":
		return errors.New("a bucket is required")
	case q.Key == "":
		return errors.New("a key (or a prefix) is required")
	case len(q.Key) > 1024:
		return errors.New("the key is longer than 1024 bytes")
	case q.AccessKeyID == "":
		return errors.New("an access key is required")
	case q.ExactSize != nil && q.MaxSize != nil:
		return errors.New("an exact size or a maximum, not both")
	case q.ExactSize != nil && *q.ExactSize > 5<<30, q.MaxSize != nil && *q.MaxSize > 5<<30:
		return errors.New("the size is over S3's 5 GiB limit for one PUT")
	case q.TTL < time.Second || q.TTL > 7*24*time.Hour:
		return errors.New("the expiry must be between 1s and 7 days")
	case len(q.Metadata) > MaxReservationMetadata:
		return fmt.Errorf("the metadata is over %d bytes", MaxReservationMetadata)
	case len(q.Metadata) > 0 && !json.Valid(q.Metadata):
		return errors.New("the metadata is not valid JSON")
	}
	named := 0
	for _, c := range []struct {
		name, value string
		size        int
	}{{"SHA-256", q.SHA256, sha256.Size}, {"CRC32C", q.CRC32C, 4}, {"CRC64NVME", q.CRC64NVME, 8}} {
		if c.value == "" {
			continue
		}
		named++
		if b, err := base64.StdEncoding.DecodeString(c.value); err != nil || len(b) != c.size {
			return fmt.Errorf("the %s must be %d bytes, base64", c.name, c.size)
		}
	}
	if named > 1 {
		return errors.New("at most one expected checksum (sha256, crc32c or crc64nvme)")
	}
	return nil
}

// nullString is s, or NULL when it is empty.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Checksum is the reservation's expected checksum as S3 names its header's
// algorithm ("sha256", "crc32c", "crc64nvme") and its base64 value; "" for
// none.
func (r Reservation) Checksum() (algorithm, value string) {
	switch {
	case r.SHA256 != "":
		return "sha256", r.SHA256
	case r.CRC32C != "":
		return "crc32c", r.CRC32C
	case r.CRC64NVME != "":
		return "crc64nvme", r.CRC64NVME
	}
	return "", ""
}

// Errors of Complete, besides ErrNoSuchReservation and ErrReservationEnded.
var (
	// ErrNotUploaded: the catalog's current generation at the key is not
	// the verified bytes (none, older than the reservation, or another
	// reservation's).
	ErrNotUploaded = errors.New("the reservation's key does not hold its upload")
	// ErrUploadMismatch: the bytes' size is not the reservation's.
	ErrUploadMismatch = errors.New("the upload does not match its reservation")
)

// Complete commits a live reservation on the key's current generation, which
// must be the bytes the caller verified at the store (etag, size), through
// fencegate_reservation_complete: the same move as the commit trigger's, in
// one transaction. Idempotent: a committed reservation is returned as it is;
// an ended one (or one past its expiry) is ErrReservationEnded. The returned
// row is the reservation's current state.
func (s *Reservations) Complete(ctx context.Context, id, etag string, size int64) (Reservation, error) {
	if !validUUID(id) {
		return Reservation{}, ErrNoSuchReservation
	}
	var outcome *string
	if err := s.Pool.QueryRow(ctx, `SELECT fencegate_reservation_complete($1, $2, $3)`, id, etag, size).Scan(&outcome); err != nil {
		return Reservation{}, err
	}
	if outcome == nil {
		return Reservation{}, ErrNoSuchReservation
	}
	r, err := s.Get(ctx, id)
	if err != nil {
		return r, err
	}
	switch *outcome {
	case ReservationCommitted:
		return r, nil
	case "unsettled":
		return r, ErrNotUploaded
	case "mismatch":
		return r, ErrUploadMismatch
	}
	return r, ErrReservationEnded
}
