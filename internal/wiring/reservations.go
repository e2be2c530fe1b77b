package wiring

import (
	"context"
	"sync"
	"time"

	"github.com/fencegate/fencegate/gateway"
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
		Live: r.State == meta.ReservationReserved, ExpiresAt: r.ExpiresAt, ExactSize: -1, MaxSize: -1, SHA256: r.SHA256}
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
