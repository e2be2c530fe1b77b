package wiring

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// Reservations serves gateway's reservation checks from meta.Reservations.
// Which buckets have a live reservation is read at most every
// LiveBucketsEvery, so a write to a bucket without one costs no round trip;
// a reservation younger than that may be missed at admission, and the
// commit's trigger refuses such a write instead.
type Reservations struct {
	Store            *meta.Reservations
	LiveBucketsEvery time.Duration // default 1 s
	// For complete (complete.go): the key is settled through Leases, its
	// bytes read from Objects (the gateway's store client, set once the
	// gateway is made).
	Leases  *lease.Manager
	Objects lease.Store

	mu      sync.Mutex
	readAt  time.Time
	buckets map[string]bool
}

func (w *Reservations) Reservation(ctx context.Context, id string) (gateway.ReservedUpload, bool, error) {
	r, err := w.Store.Get(ctx, id)
	if err == meta.ErrNoSuchReservation {
		return gateway.ReservedUpload{}, false, nil
	}
	if err != nil {
		return gateway.ReservedUpload{}, false, err
	}
	u := gateway.ReservedUpload{ID: r.ID, Bucket: r.Bucket, Key: r.Key, AccessKeyID: r.AccessKeyID,
		Live: r.State == meta.ReservationReserved, ExpiresAt: r.ExpiresAt, ExactSize: -1, MaxSize: -1}
	if alg, value := r.Checksum(); alg != "" {
		u.ChecksumHeader, u.Checksum = "x-amz-checksum-"+alg, value
	}
	if r.ExactSize != nil {
		u.ExactSize = *r.ExactSize
	}
	if r.MaxSize != nil {
		u.MaxSize = *r.MaxSize
	}
	return u, true, nil
}

func (w *Reservations) Reserved(ctx context.Context, bucket, key string) (bool, error) {
	live, err := w.liveBuckets(ctx)
	if err != nil || !live[bucket] {
		return false, err
	}
	_, ok, err := w.Store.Live(ctx, bucket, key)
	return ok, err
}

func (w *Reservations) liveBuckets(ctx context.Context) (map[string]bool, error) {
	every := w.LiveBucketsEvery
	if every <= 0 {
		every = time.Second
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buckets != nil && time.Since(w.readAt) < every {
		return w.buckets, nil
	}
	all, err := w.Store.LiveBuckets(ctx)
	if err != nil {
		return nil, err
	}
	w.buckets = make(map[string]bool, len(all))
	for _, b := range all {
		w.buckets[b] = true
	}
	w.readAt = time.Now()
	return w.buckets, nil
}

func (w *Reservations) Bind(ctx context.Context, id, attempt, bucket, key string) (bool, error) {
	return w.Store.Bind(ctx, id, attempt, bucket, key)
}

func (w *Reservations) BoundTo(ctx context.Context, attempt string) (string, bool, error) {
	return w.Store.BoundTo(ctx, attempt)
}

// View is meta's reservation in the client package's shape.
func View(r meta.Reservation) reservations.Reservation {
	return reservations.Reservation{ID: r.ID, Bucket: r.Bucket, Key: r.Key, AccessKeyID: r.AccessKeyID, Account: r.Account,
		ExactSize: r.ExactSize, MaxSize: r.MaxSize, Reserved: r.Reserved, SHA256: r.SHA256, CRC32C: r.CRC32C, CRC64NVME: r.CRC64NVME, ContentType: r.ContentType,
		Metadata: r.Metadata, State: r.State, ExpiresAt: r.ExpiresAt, CreatedAt: r.CreatedAt, EndedAt: r.EndedAt,
		Size: r.Size, ETag: r.ETag, Generation: r.Generation}
}

// Request turns an API or command-line request into meta's, choosing the
// key under a prefix: the prefix plus the idempotency key when there is one
// (so a repeat names the same key), else plus a random name.
func Request(accessKey string, q reservations.CreateRequest) (meta.ReservationRequest, error) {
	ttl := 15 * time.Minute
	if q.Expires != "" {
		d, err := time.ParseDuration(q.Expires)
		if err != nil {
			return meta.ReservationRequest{}, fmt.Errorf("expires %q: %w", q.Expires, err)
		}
		ttl = d
	}
	key := q.Key
	switch {
	case key != "" && q.Prefix != "":
		return meta.ReservationRequest{}, errors.New("a key or a prefix, not both")
	case key == "" && q.Prefix != "" && q.IdempotencyKey != "":
		key = q.Prefix + q.IdempotencyKey
	case key == "" && q.Prefix != "":
		var b [12]byte
		_, _ = rand.Read(b[:])
		key = q.Prefix + hex.EncodeToString(b[:])
	}
	m := meta.ReservationRequest{Bucket: q.Bucket, Key: key, AccessKeyID: accessKey, Account: q.Account,
		ExactSize: q.Size, MaxSize: q.MaxSize, SHA256: q.SHA256, CRC32C: q.CRC32C, CRC64NVME: q.CRC64NVME, ContentType: q.ContentType,
		Metadata: q.Metadata, IdempotencyKey: q.IdempotencyKey, TTL: ttl}
	return m, meta.ValidateReservation(m)
}

// apiError maps meta's reservation errors to the API's.
func apiError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, meta.ErrNoSuchReservation):
		return reservations.ErrNotFound
	case errors.Is(err, meta.ErrIdempotencyReused):
		return reservations.ErrIdempotencyReuse
	case errors.Is(err, meta.ErrQuotaExceeded):
		return reservations.ErrQuotaExceeded
	case errors.Is(err, meta.ErrNoSuchAccount):
		return reservations.ErrNoSuchAccount
	case errors.Is(err, meta.ErrKeyReserved):
		return reservations.ErrKeyReserved
	case errors.Is(err, meta.ErrReservationEnded):
		return reservations.ErrNotLive
	}
	return err
}

// CreateReservation serves the API's create.
func (w *Reservations) CreateReservation(ctx context.Context, accessKey string, q reservations.CreateRequest) (reservations.Reservation, bool, error) {
	m, err := Request(accessKey, q)
	if err != nil {
		return reservations.Reservation{}, false, reservations.Invalid(err.Error())
	}
	r, err := w.Store.Create(ctx, m)
	return View(r), r.Made, apiError(err)
}

func (w *Reservations) GetReservation(ctx context.Context, id string) (reservations.Reservation, error) {
	r, err := w.Store.Get(ctx, id)
	return View(r), apiError(err)
}

func (w *Reservations) ListReservations(ctx context.Context, bucket string) ([]reservations.Reservation, error) {
	all, err := w.Store.List(ctx, bucket, 1000)
	out := make([]reservations.Reservation, len(all))
	for i, r := range all {
		out[i] = View(r)
	}
	return out, err
}

func (w *Reservations) CancelReservation(ctx context.Context, id string) (reservations.Reservation, error) {
	r, err := w.Store.End(ctx, id, meta.ReservationCancelled)
	return View(r), apiError(err)
}
