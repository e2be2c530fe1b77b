package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// putAround writes body at key straight to the store, around the gateway,
// with its SHA-256 checksum (as a client uploading elsewhere would).
func (k *reservationKit) putAround(t *testing.T, key string, body []byte) {
	t.Helper()
	if _, err := k.g.Store.S3Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &k.bucket, Key: aws.String(key),
		Body: bytes.NewReader(body), ChecksumAlgorithm: types.ChecksumAlgorithmSha256}); err != nil {
		t.Fatal(err)
	}
}

func (k *reservationKit) client() *reservations.Client {
	return &reservations.Client{Endpoint: k.g.URL, AccessKey: k.g.AccessKey, SecretKey: k.g.SecretKey}
}

// TestReservationComplete: complete before any upload is 409
// ReservationNotUploaded and changes nothing; after a PUT through the URL
// (already committed) every repeat answers the same committed state; bytes
// written around the gateway are verified (size, SHA-256), recorded by a
// settle as an external generation, and the reservation commits on it with
// its quota moved; bytes of the wrong size or checksum are refused (400)
// and the reservation stays reserved.
func TestReservationComplete(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	ctx := context.Background()
	account := "complete-" + randomSuffix()
	if err := k.rs.SetQuota(ctx, account, 100, nil); err != nil {
		t.Fatal(err)
	}
	c := k.client()
	body := []byte("hello")
	sum := sha256Base64(body)

	r := k.reserve(t, meta.ReservationRequest{Key: "through", ExactSize: ptr[int64](5), SHA256: sum, Account: account})
	if _, err := c.Complete(ctx, r.ID); !errors.Is(err, reservations.ErrNotUploaded) {
		t.Fatalf("complete before the upload: %v, want 409 ReservationNotUploaded", err)
	}
	if st := k.state(t, r.ID); st.State != meta.ReservationReserved {
		t.Fatalf("after a refused complete: %s", st.State)
	}
	if q, _ := k.rs.GetQuota(ctx, account); q.ReservedBytes != 5 || q.UsedBytes != 0 {
		t.Fatalf("quota after a refused complete: %+v", q)
	}
	if res := putURL(r.PutURL, body, r.PutHeaders); res.Status != 200 {
		t.Fatalf("PUT: %d %s", res.Status, res.Code)
	}
	first, err := c.Complete(ctx, r.ID)
	if err != nil || first.State != reservations.Committed || first.Size == nil || *first.Size != 5 || first.Generation == nil {
		t.Fatalf("complete after the PUT: %v %+v", err, first)
	}
	again, err := c.Complete(ctx, r.ID)
	if err != nil || again.State != first.State || again.ETag != first.ETag || *again.Generation != *first.Generation {
		t.Fatalf("repeat: %v %+v, want %+v", err, again, first)
	}

	out := k.reserve(t, meta.ReservationRequest{Key: "around", ExactSize: ptr[int64](5), SHA256: sum, Account: account})
	k.putAround(t, "around", body)
	done, err := c.Complete(ctx, out.ID)
	if err != nil || done.State != reservations.Committed || done.Generation == nil {
		t.Fatalf("complete of bytes written around the gateway: %v %+v", err, done)
	}
	var origin, etag string
	if err := k.g.Keys.Pool.QueryRow(ctx, `SELECT origin, etag FROM catalog WHERE bucket = $1 AND key = 'around' AND generation = $2`,
		k.bucket, *done.Generation).Scan(&origin, &etag); err != nil || origin != "external" || etag != done.ETag {
		t.Fatalf("the committed generation: %v origin %q etag %q, want external %q", err, origin, etag, done.ETag)
	}
	if again, err := c.Complete(ctx, out.ID); err != nil || *again.Generation != *done.Generation {
		t.Fatalf("repeat: %v %+v", err, again)
	}
	if q, _ := k.rs.GetQuota(ctx, account); q.ReservedBytes != 0 || q.UsedBytes != 10 {
		t.Fatalf("quota after two commits: %+v, want reserved 0 used 10", q)
	}
	var events int
	if err := k.g.Keys.Pool.QueryRow(ctx, `SELECT count(*) FROM reservation_events WHERE reservation_id = $1
		AND event = 'reservation.committed'`, out.ID).Scan(&events); err != nil || events != 1 {
		t.Fatalf("committed events: %d %v, want 1", events, err)
	}

	wrongSize := k.reserve(t, meta.ReservationRequest{Key: "short", ExactSize: ptr[int64](6)})
	k.putAround(t, "short", body)
	if _, err := c.Complete(ctx, wrongSize.ID); !errors.Is(err, &reservations.APIError{Code: "InvalidArgument"}) {
		t.Fatalf("complete of 5 bytes for 6: %v, want 400 InvalidArgument", err)
	}
	wrongSum := k.reserve(t, meta.ReservationRequest{Key: "other", ExactSize: ptr[int64](5), SHA256: sum})
	k.putAround(t, "other", []byte("world"))
	if _, err := c.Complete(ctx, wrongSum.ID); !errors.Is(err, &reservations.APIError{Code: "BadDigest"}) {
		t.Fatalf("complete of other bytes: %v, want 400 BadDigest", err)
	}
	for _, id := range []string{wrongSize.ID, wrongSum.ID} {
		if st := k.state(t, id).State; st != meta.ReservationReserved {
			t.Fatalf("after a refused complete: %s", st)
		}
	}
}

// TestReservationCompleteVersusSweeper: reservations whose bytes were
// written around the gateway are completed at about their expiry while
// the sweeper runs every few milliseconds: each ends committed or expired,
// never both, and a committed one keeps its bytes.
func TestReservationCompleteVersusSweeper(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{Reconcile: 20 * time.Millisecond,
		Lifecycle: &lease.LifecycleConfig{Kinds: []string{lease.KindUnresolved, lease.KindReservations}}})
	ctx := context.Background()
	c := k.client()
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		key := "race-" + string(rune('a'+i))
		ids[i] = k.reserve(t, meta.ReservationRequest{Key: key, ExactSize: ptr[int64](5), TTL: time.Second}).ID
		k.putAround(t, key, []byte("hello"))
	}
	created := k.state(t, ids[0]).CreatedAt
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the completes over the expiry: some before, some after.
			time.Sleep(time.Until(created.Add(time.Second - 40*time.Millisecond + time.Duration(i)*10*time.Millisecond)))
			r, err := c.Complete(ctx, id)
			if err != nil && !errors.Is(err, reservations.ErrNotLive) {
				t.Errorf("complete %s: %v", id, err)
			}
			if err == nil && r.State != reservations.Committed {
				t.Errorf("complete %s answered %s", id, r.State)
			}
		}()
	}
	wg.Wait()
	waitFor(t, "every reservation ended", 10*time.Second, func() bool {
		for _, id := range ids {
			if k.state(t, id).State == meta.ReservationReserved {
				return false
			}
		}
		return true
	})
	committed := 0
	for i, id := range ids {
		r := k.state(t, id)
		var events int
		if err := k.g.Keys.Pool.QueryRow(ctx, `SELECT count(*) FROM reservation_events WHERE reservation_id = $1
			AND event IN ('reservation.committed', 'reservation.expired')`, id).Scan(&events); err != nil || events != 1 {
			t.Errorf("%s: %d ending events (%v), want 1", id, events, err)
		}
		if r.State == meta.ReservationCommitted {
			committed++
			if !k.atStore(t, r.Key) {
				t.Errorf("reservation %d committed without its bytes", i)
			}
		}
	}
	t.Logf("%d of %d committed, the rest expired", committed, n)
}

// TestReservationMetrics: each move of a reservation is counted once on
// /metrics: created through the API (an idempotent repeat not again),
// committed by a PUT under it and by a complete, cancelled, expired by the
// sweeper.
func TestReservationMetrics(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{Reconcile: 100 * time.Millisecond,
		Lifecycle: &lease.LifecycleConfig{Kinds: []string{lease.KindReservations}}})
	ctx := context.Background()
	c := k.client()
	body := []byte("hello")
	create := func(q reservations.CreateRequest) reservations.Reservation {
		t.Helper()
		q.Bucket = k.bucket
		r, err := c.Create(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	put := create(reservations.CreateRequest{Key: "put", Size: ptr[int64](5), IdempotencyKey: "put"})
	create(reservations.CreateRequest{Key: "put", Size: ptr[int64](5), IdempotencyKey: "put"})
	if res := putURL(put.PutURL, body, nil); res.Status != 200 {
		t.Fatalf("PUT: %d %s", res.Status, res.Code)
	}
	completed := create(reservations.CreateRequest{Key: "completed", Size: ptr[int64](5)})
	k.putAround(t, "completed", body)
	for range 2 {
		if _, err := c.Complete(ctx, completed.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Cancel(ctx, create(reservations.CreateRequest{Key: "cancelled"}).ID); err != nil {
		t.Fatal(err)
	}
	expired := create(reservations.CreateRequest{Key: "expired", Expires: "1s"})
	waitFor(t, "the sweeper to expire the reservation", 10*time.Second, func() bool {
		return k.state(t, expired.ID).State == meta.ReservationExpired
	})
	m := metricsOf(t, k.g.Admin)
	for name, want := range map[string]float64{"fencegate_reservations_created_total": 4, "fencegate_reservations_committed_total": 2,
		"fencegate_reservations_cancelled_total": 1, "fencegate_reservations_expired_total": 1} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
}

// TestReservationsCommandComplete: `fencegate reservations complete ID
// --json` asks the gateway (FENCEGATE_ENDPOINT, signed with the
// environment's key) and prints the committed reservation; before the
// upload it exits non-zero and the reservation stays reserved.
func TestReservationsCommandComplete(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	r := k.reserve(t, meta.ReservationRequest{Key: "cli", ExactSize: ptr[int64](5)})
	run := func() ([]byte, error) {
		cmd := exec.Command(fencegateBinary(t), "reservations", "complete", r.ID, "--json")
		cmd.Env = append(os.Environ(), "FENCEGATE_ENDPOINT="+k.g.URL, "AWS_ACCESS_KEY_ID="+k.g.AccessKey,
			"AWS_SECRET_ACCESS_KEY="+k.g.SecretKey, "DATABASE_URL="+testenv.DatabaseURL(t))
		return cmd.CombinedOutput()
	}
	if out, err := run(); err == nil || !strings.Contains(string(out), "ReservationNotUploaded") {
		t.Fatalf("complete before the upload: %v %s", err, out)
	}
	if st := k.state(t, r.ID).State; st != meta.ReservationReserved {
		t.Fatalf("after a refused complete: %s", st)
	}
	k.putAround(t, "cli", []byte("hello"))
	out, err := run()
	var got reservations.Reservation
	if err != nil || json.Unmarshal(out, &got) != nil || got.State != reservations.Committed || got.Size == nil || *got.Size != 5 {
		t.Fatalf("complete: %v %s", err, out)
	}
}
