package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// Every try of a CompleteMultipartUpload is an attempt of its own: a retry
// neither touches the earlier try's guard nor shares its lease, so the earlier
// try's late release cannot free the retry's lease.
func TestCompleteTriesAreSeparateAttempts(t *testing.T) {
	c := catalog(t)
	drv := &failingRenewals{Catalog: c}
	cfg := lease.Config{TTL: 1500 * time.Millisecond, RenewEvery: 200 * time.Millisecond, Margin: 500 * time.Millisecond,
		WaitMax: 5 * time.Second, WaitPoll: 20 * time.Millisecond}
	ctx := context.Background()
	key := "tries-" + lease.NewID()
	upload := lease.NewID()
	if err := c.RecordAttempt(ctx, lease.Attempt{ID: upload, Bucket: "b", Key: key, Op: "multipart", State: lease.StateOpen,
		Gateway: "test", DeclaredSize: -1}); err != nil {
		t.Fatal(err)
	}
	req := lease.Request{Bucket: "b", Key: key, Op: "complete", UploadAttempt: upload, DeclaredSize: -1}

	// The first try loses its lease (renewals fail) while its Complete is
	// outstanding.
	first, err := lease.NewManager(cfg, drv, nil).Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	drv.fail.Store(true)
	<-first.Lost()
	// The client retries through another gateway once the lease has expired.
	second, err := lease.NewManager(cfg, c, nil).Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if second.AttemptID == first.AttemptID || second.AttemptID == upload {
		t.Fatalf("the retry holds attempt %s (first try %s, upload %s): want an attempt of its own", second.AttemptID, first.AttemptID, upload)
	}
	if s := state(t, c, first.AttemptID); s != lease.StateUnknown {
		t.Fatalf("the first try is %s after the takeover, want unknown (it may land)", s)
	}
	// The first try's late release frees nothing of the second's.
	first.Fail("a late failure of the first try")
	if _, err := lease.NewManager(cfg, c, nil).Acquire(ctx, lease.Request{Bucket: "b", Key: key, Op: "put", DeclaredSize: 1, NoWait: true}); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("a third writer after the first try's late release: %v, want ErrBusy (the retry holds the key)", err)
	}
	// The retry is refused by the store; its failure leaves the first try's
	// guard alone.
	second.Fail("the store refused the retry")
	if s := state(t, c, first.AttemptID); s != lease.StateUnknown {
		t.Fatalf("the first try is %s after the retry failed, want unknown", s)
	}
	if s := state(t, c, upload); s != lease.StateOpen {
		t.Fatalf("the upload is %s, want open (no try published it)", s)
	}
	a, err := c.AttemptByID(ctx, first.AttemptID)
	if err != nil || a.UploadAttempt != upload {
		t.Fatalf("first try %+v (%v): want it to name upload %s", a, err, upload)
	}
}
