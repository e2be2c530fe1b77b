package conformance

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// sweepState is what the sweeper recorded of a reservation.
type sweepState struct {
	swept     bool
	tries     int
	lastError string
}

func sweepStateOf(t *testing.T, k *reservationKit, id string) sweepState {
	t.Helper()
	var s sweepState
	if err := k.g.Keys.Pool.QueryRow(context.Background(), `SELECT swept_at IS NOT NULL, tries, coalesce(last_error, '')
		FROM reservations WHERE reservation_id = $1`, id).Scan(&s.swept, &s.tries, &s.lastError); err != nil {
		t.Fatal(err)
	}
	return s
}

// uploadAttemptState is the state of the multipart attempt bound to the
// reservation ("" when none).
func uploadAttemptState(t *testing.T, k *reservationKit, id string) string {
	t.Helper()
	var st string
	_ = k.g.Keys.Pool.QueryRow(context.Background(), `SELECT t.state FROM reservation_attempts a JOIN attempts t USING (attempt_id)
		WHERE a.reservation_id = $1 AND t.op = 'multipart'`, id).Scan(&st)
	return st
}

// uploadAtStore reports whether the store still has the upload (ListParts
// answers; NoSuchUpload once it is aborted).
func uploadAtStore(t *testing.T, c *s3.Client, bucket, key, uploadID string) bool {
	t.Helper()
	_, err := c.ListParts(context.Background(), &s3.ListPartsInput{Bucket: &bucket, Key: &key, UploadId: &uploadID})
	switch {
	case err == nil:
		return true
	case s3Code(err) == "NoSuchUpload":
		return false
	}
	t.Fatalf("ListParts at the store: %v", err)
	return false
}

// TestReservationSweepAbortsUploads: a reservation with an open multipart
// upload bound to it (a part uploaded) that is cancelled, or expires, is
// swept only once the sweeper aborted the upload at the store (ListParts
// then NoSuchUpload, the attempt recorded aborted), its quota released
// once. While the store refuses the abort, the reservation stays claimed
// and unswept, the upload open, the failure recorded; it is swept once the
// store answers again.
func TestReservationSweepAbortsUploads(t *testing.T) {
	var failAborts atomic.Bool
	var refused atomic.Int64
	st := testenv.Store(t)
	front := st
	front.URL = startStoreFront(t, st.URL, func(w http.ResponseWriter, r *http.Request, store http.Handler) {
		if failAborts.Load() && r.Method == http.MethodDelete && r.URL.Query().Has("uploadId") {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>the abort fails (test)</Message></Error>`))
			return
		}
		store.ServeHTTP(w, r)
	})
	k := newMultipartKitWith(t, gatewayOptions{Store: &front, Reconcile: 200 * time.Millisecond,
		Lifecycle: &lease.LifecycleConfig{Kinds: []string{lease.KindUnresolved, lease.KindReservations}, RetryAfter: 200 * time.Millisecond}})
	ctx := context.Background()
	account := "sweep-uploads-" + randomSuffix()
	if err := k.rs.SetQuota(ctx, account, 1<<30, nil); err != nil {
		t.Fatal(err)
	}
	direct := st.S3Client()
	const max = 6 << 20

	// open reserves key, starts its bound upload and uploads a part.
	open := func(t *testing.T, key, expires string) (reservations.Reservation, string) {
		r := k.create(t, reservations.CreateRequest{Key: key, MaxSize: ptr[int64](max), Account: account, Expires: expires})
		id, status, code := createUpload(t, r.MultipartCreateURL)
		if status != 200 || id == "" {
			t.Fatalf("create: %d %s", status, code)
		}
		uploadParts(t, k.reserver.S3Client(), k.bucket, r.Key, id, []byte("0123456789"))
		if q, err := k.rs.GetQuota(ctx, account); err != nil || q.ReservedBytes < max {
			t.Fatalf("quota before the end %+v (%v)", q, err)
		}
		return r, id
	}
	quotaReleased := func(t *testing.T) {
		t.Helper()
		q, err := k.rs.GetQuota(ctx, account)
		if err != nil || q.ReservedBytes != 0 || q.UsedBytes != 0 {
			t.Fatalf("quota %+v (%v): want nothing reserved, nothing used", q, err)
		}
	}
	sweptAndAborted := func(t *testing.T, r reservations.Reservation, uploadID, state string) {
		t.Helper()
		waitFor(t, "the reservation swept", 30*time.Second, func() bool { return sweepStateOf(t, k.reservationKit, r.ID).swept })
		if uploadAtStore(t, direct, k.bucket, r.Key, uploadID) {
			t.Fatal("the reservation was swept with its upload still open at the store")
		}
		if s := uploadAttemptState(t, k.reservationKit, r.ID); s != "aborted" {
			t.Fatalf("the upload's attempt is %q, want aborted", s)
		}
		if got := k.state(t, r.ID).State; got != state {
			t.Fatalf("reservation %s, want %s", got, state)
		}
		if k.atStore(t, r.Key) || k.published(t, r.Key) != 0 {
			t.Fatal("the upload published an object")
		}
	}

	t.Run("cancelled", func(t *testing.T) {
		r, id := open(t, "mp/cancelled", "")
		if _, err := k.api.Cancel(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		sweptAndAborted(t, r, id, meta.ReservationCancelled)
		quotaReleased(t)
	})
	t.Run("expired", func(t *testing.T) {
		r, id := open(t, "mp/expired", "3s")
		sweptAndAborted(t, r, id, meta.ReservationExpired)
		quotaReleased(t)
	})
	t.Run("abort-fails", func(t *testing.T) {
		r, id := open(t, "mp/abort-fails", "")
		failAborts.Store(true)
		if _, err := k.api.Cancel(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "two refused aborts", 30*time.Second, func() bool {
			return refused.Load() >= 2 && sweepStateOf(t, k.reservationKit, r.ID).tries >= 2
		})
		s := sweepStateOf(t, k.reservationKit, r.ID)
		if s.swept || s.lastError == "" {
			t.Fatalf("while the store refuses the abort: %+v, want claimed, unswept, the failure recorded", s)
		}
		if !uploadAtStore(t, direct, k.bucket, r.Key, id) {
			t.Fatal("the upload is gone although every abort was refused")
		}
		if s := uploadAttemptState(t, k.reservationKit, r.ID); s != "open" {
			t.Fatalf("the upload's attempt is %q while its abort fails, want open", s)
		}
		quotaReleased(t) // released at the cancel, once
		failAborts.Store(false)
		sweptAndAborted(t, r, id, meta.ReservationCancelled)
		quotaReleased(t)
	})
	// One abort counted per upload, the refused ones not.
	if n := metricsOf(t, k.g.Admin)[`fencegate_reservation_sweep_actions_total{action="upload_aborted"}`]; n != 3 {
		t.Errorf("fencegate_reservation_sweep_actions_total{action=\"upload_aborted\"} = %v, want 3", n)
	}
}

// TestReservationSweepComesBackSoonAfterABusyKey: the sweep of an ended
// reservation whose key another writer holds gives the claim back after the
// back-off (RetryAfter, doubling), not after the whole claim (ClaimFor, 2x
// the lease TTL: 20 s here): once the holder lets go, the reservation is
// swept within seconds. Seen in chaos seed 1796294084404179075, whose last
// reservation waited 1m31s for its sweep after a busy key.
func TestReservationSweepComesBackSoonAfterABusyKey(t *testing.T) {
	k := newMultipartKitWith(t, gatewayOptions{Reconcile: 200 * time.Millisecond,
		Lifecycle: &lease.LifecycleConfig{Kinds: []string{lease.KindReservations}, RetryAfter: 200 * time.Millisecond}})
	ctx := context.Background()
	r := k.create(t, reservations.CreateRequest{Key: "busy", MaxSize: ptr[int64](6 << 20)})
	id, status, code := createUpload(t, r.MultipartCreateURL)
	if status != 200 || id == "" {
		t.Fatalf("create: %d %s", status, code)
	}
	release := k.holdKey(t, r.Key)
	if _, err := k.api.Cancel(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sweeper to find the key busy", 20*time.Second, func() bool { return sweepStateOf(t, k.reservationKit, r.ID).tries >= 1 })
	time.Sleep(time.Second) // a try or two more on the busy key
	if s := sweepStateOf(t, k.reservationKit, r.ID); s.swept {
		t.Fatal("swept while another writer held its key")
	}
	release()
	released := time.Now()
	waitFor(t, "the reservation swept once the key is free", 15*time.Second, func() bool { return sweepStateOf(t, k.reservationKit, r.ID).swept })
	if d := time.Since(released); d > 5*time.Second {
		t.Fatalf("swept %s after the key was freed; want the back-off's seconds, not the claim's 20 s", d.Round(time.Millisecond))
	}
	if s := uploadAttemptState(t, k.reservationKit, r.ID); s != "aborted" {
		t.Fatalf("the upload's attempt is %q, want aborted", s)
	}
}
