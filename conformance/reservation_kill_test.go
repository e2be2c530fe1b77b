package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/meta"
)

// TestReservationGatewayKilled: reserved PUTs whose gateways die at the
// write protocol's failpoints, after-lease (nothing bound or sent) and
// after-store-ack (bound, the bytes at the store, nothing committed), each
// with a reservation that outlives the crash and one that expires before
// the dead lease does. Another gateway's reconciler and sweeper repair
// every one: bytes of a live reservation are adopted and commit it (quota
// moved to used); a live reservation with nothing sent stays reserved and
// its URL still publishes once; an expired one ends expired with its quota
// released and its bytes deleted. Never a committed reservation without
// its bytes, never bytes left for an ended one.
func TestReservationGatewayKilled(t *testing.T) {
	ctx := context.Background()
	store := testenv.Store(t)
	fencegateBinary(t)
	rs := &meta.Reservations{Pool: packageKeys(t).Pool}
	bucket := "t-resv-killed-" + randomSuffix()
	account := "killed-" + randomSuffix()
	if err := rs.SetQuota(ctx, account, 1000, nil); err != nil {
		t.Fatal(err)
	}
	body := []byte("hello")
	type crash struct {
		name, failpoint string
		ttl             time.Duration
		g               *gatewayProcess
		r               reservations.Reservation
	}
	crashes := []*crash{
		{name: "ack-live", failpoint: "after-store-ack", ttl: time.Minute},
		{name: "ack-expired", failpoint: "after-store-ack", ttl: 2 * time.Second},
		{name: "lease-live", failpoint: "after-lease", ttl: time.Minute},
		{name: "lease-expired", failpoint: "after-lease", ttl: 2 * time.Second},
	}
	for _, c := range crashes {
		c.g = startGatewayProcess(t, store, envWith(shortLeaseEnv, noReconcileEnv, "FENCEGATE_FAILPOINT="+c.failpoint)...)
	}
	if _, err := crashes[0].g.S3Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	for _, c := range crashes {
		m, err := rs.Create(ctx, meta.ReservationRequest{Bucket: bucket, Key: c.name, AccessKeyID: c.g.Endpoint.AccessKey,
			Account: account, ExactSize: ptr[int64](int64(len(body))), TTL: c.ttl})
		if err != nil {
			t.Fatal(err)
		}
		c.r = reservations.Reservation{ID: m.ID, Bucket: bucket, Key: m.Key, AccessKeyID: m.AccessKeyID, State: m.State, ExpiresAt: m.ExpiresAt}
		if err := reservations.PresignPut(&c.r, c.g.Endpoint.URL, "us-east-1", c.g.Endpoint.SecretKey, time.Now()); err != nil {
			t.Fatal(err)
		}
		if res := putURL(c.r.PutURL, body, nil); res.Err == nil {
			t.Fatalf("%s: the PUT was answered %d; its failpoint should have killed the gateway", c.name, res.Status)
		}
		requireKilled(t, c.g, c.name)
		atStore := storeObjectOf(t, store, bucket, c.name).exists
		if atStore != (c.failpoint == "after-store-ack") {
			t.Fatalf("%s: at the store after the crash: %v", c.name, atStore)
		}
	}

	// The repairer: a gateway whose lifecycle service runs every kind (the
	// unresolved attempts' settle and the reservations' sweep) every second.
	n := startGatewayProcess(t, store, envWith(shortLeaseEnv, "FENCEGATE_RECONCILE_INTERVAL=1s")...)
	want := map[string]string{"ack-live": meta.ReservationCommitted, "ack-expired": meta.ReservationExpired,
		"lease-live": meta.ReservationReserved, "lease-expired": meta.ReservationExpired}
	settled := func(c *crash) bool {
		r, err := rs.Get(ctx, c.r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != want[c.name] {
			return false
		}
		switch r.State {
		case meta.ReservationCommitted:
			return true
		case meta.ReservationExpired:
			row, ok := catalogOf(t, bucket, c.name)
			return !storeObjectOf(t, store, bucket, c.name).exists && (!ok || row.Deleted)
		}
		// Reserved: once its dead attempt is settled, nothing of it left.
		return len(attemptStates(t, bucket, c.name)) > 0 && attemptStates(t, bucket, c.name)["leased"] == 0
	}
	waitFor(t, "every crashed reservation repaired", 40*time.Second, func() bool {
		for _, c := range crashes {
			if !settled(c) {
				return false
			}
		}
		return true
	})
	for _, c := range crashes {
		r, _ := rs.Get(ctx, c.r.ID)
		obj := storeObjectOf(t, store, bucket, c.name)
		row, inCatalog := catalogOf(t, bucket, c.name)
		t.Logf("%s: %s, at the store %v, catalog %+v", c.name, r.State, obj.exists, row)
		if r.State == meta.ReservationCommitted && (!obj.exists || !inCatalog || row.Deleted || row.Origin != "adopted" ||
			r.Generation == nil || *r.Generation != row.Generation) {
			t.Fatalf("%s committed without its bytes: store %+v catalog %+v", c.name, obj, row)
		}
	}

	// The live reservation whose gateway died before sending is still
	// usable: its URL, presigned for the repairer, publishes once.
	live := crashes[2].r
	if err := reservations.PresignPut(&live, n.Endpoint.URL, "us-east-1", crashes[2].g.Endpoint.SecretKey, time.Now()); err != nil {
		t.Fatal(err)
	}
	if res := putURL(live.PutURL, body, nil); res.Status != 200 {
		t.Fatalf("PUT of the surviving reservation: %d %s %v", res.Status, res.Code, res.Err)
	}
	if r, _ := rs.Get(ctx, live.ID); r.State != meta.ReservationCommitted {
		t.Fatalf("the surviving reservation after its PUT: %s", r.State)
	}
	q, err := rs.GetQuota(ctx, account)
	if err != nil || q.ReservedBytes != 0 || q.UsedBytes != 2*int64(len(body)) {
		t.Fatalf("quota %+v (%v): want nothing reserved and the two committed objects used", q, err)
	}
}
