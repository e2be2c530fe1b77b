package conformance

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// putAttemptState is the state of the reservation's PutObject attempt (""
// when none).
func putAttemptState(t *testing.T, k *reservationKit, id string) string {
	t.Helper()
	var st string
	_ = k.g.Keys.Pool.QueryRow(context.Background(), `SELECT t.state FROM reservation_attempts a JOIN attempts t USING (attempt_id)
		WHERE a.reservation_id = $1 AND t.op <> 'multipart'`, id).Scan(&st)
	return st
}

// TestReservationSweepGatewayKilled: the sweep of a cancelled reservation
// that left both an open bound multipart upload (a part uploaded) and bytes
// of a PUT whose commit the cancel refused is killed at each of its steps
// (the failpoints sweep-after-claim, sweep-after-abort, sweep-after-delete,
// sweep-after-commit, armed for the test's bucket in a gateway that runs
// only the reservations kind). The state the dead gateway left is checked in the database and
// at the store (it really died at that step), then another gateway's
// sweeper repairs it: the reservation ends swept and cancelled, the upload
// aborted (NoSuchUpload at the store, the attempt recorded aborted), the
// PUT's bytes deleted at the store and in the catalog, the quota released
// once (nothing reserved, used unchanged), and a committed reservation's
// object in the bucket untouched.
func TestReservationSweepGatewayKilled(t *testing.T) {
	ctx := context.Background()
	st := testenv.Store(t)
	fencegateBinary(t)
	// The writer: an in-process gateway without a lifecycle service, whose
	// PUTs under crash/ keys are held before their commit until released.
	type held struct{ reached, release chan struct{} }
	var mu sync.Mutex
	holds := map[string]*held{}
	hold := func(key string) *held {
		mu.Lock()
		defer mu.Unlock()
		if holds[key] == nil {
			holds[key] = &held{make(chan struct{}), make(chan struct{})}
		}
		return holds[key]
	}
	var bucket string
	k := newMultipartKitWith(t, gatewayOptions{Hooks: lease.Hooks{BeforeCommit: func(b, key, _ string) {
		if b == bucket && strings.HasPrefix(key, "crash/") {
			h := hold(key)
			close(h.reached)
			<-h.release
		}
	}}})
	bucket = k.bucket
	account := "sweep-kill-" + randomSuffix()
	if err := k.rs.SetQuota(ctx, account, 1<<30, nil); err != nil {
		t.Fatal(err)
	}
	const max = 6 << 20
	body := []byte("hello")

	// A committed reservation's object the sweeps must never touch.
	kept := k.create(t, reservations.CreateRequest{Key: "kept", Size: ptr[int64](int64(len(body))), Account: account})
	if res := putURL(kept.PutURL, body, nil); res.Status != 200 {
		t.Fatalf("PUT of the kept object: %d %s %v", res.Status, res.Code, res.Err)
	}
	keptRow, ok := catalogOf(t, bucket, "kept")
	if !ok || k.state(t, kept.ID).State != meta.ReservationCommitted {
		t.Fatal("the kept object was not committed")
	}
	quotaIs := func(t *testing.T, when string) {
		t.Helper()
		q, err := k.rs.GetQuota(ctx, account)
		if err != nil || q.ReservedBytes != 0 || q.UsedBytes != int64(len(body)) {
			t.Fatalf("%s: quota %+v (%v), want nothing reserved and only the kept object used", when, q, err)
		}
	}
	direct := st.S3Client()

	for _, fp := range []lease.Step{lease.StepSweepClaimed, lease.StepSweepAborted, lease.StepSweepDeleted, lease.StepSweepCommitted} {
		t.Run(string(fp), func(t *testing.T) {
			key := "crash/" + string(fp)
			r := k.create(t, reservations.CreateRequest{Key: key, MaxSize: ptr[int64](max), Account: account})
			uploadID, status, code := createUpload(t, r.MultipartCreateURL)
			if status != 200 || uploadID == "" {
				t.Fatalf("create: %d %s", status, code)
			}
			uploadParts(t, k.reserver.S3Client(), bucket, key, uploadID, []byte("0123456789"))
			done := make(chan rawResult, 1)
			go func() { done <- putURL(r.PutURL, body, nil) }()
			h := hold(key)
			within(t, h.reached, 30*time.Second, "the PUT before its commit")

			// The sweeper that dies: up before the reservation ends, so its
			// first sweep of it is a pass after the cancel.
			s := startGatewayProcess(t, st, envWith(shortLeaseEnv, "FENCEGATE_RECONCILE_INTERVAL=1s",
				"FENCEGATE_RECONCILE_KINDS="+lease.KindReservations, "FENCEGATE_FAILPOINT="+string(fp),
				// Other tests' ended reservations in the package's database
				// are swept too; only this bucket's kills the process.
				"FENCEGATE_FAILPOINT_BUCKET="+bucket)...)
			if _, err := k.api.Cancel(ctx, r.ID); err != nil {
				t.Fatal(err)
			}
			close(h.release)
			if res := within(t, done, 30*time.Second, "the PUT's answer"); res.Status != 500 {
				t.Fatalf("PUT after the cancel: %d %s %v, want 500", res.Status, res.Code, res.Err)
			}
			requireKilled(t, s, "the sweeper armed with "+string(fp))

			// What the dead sweeper left.
			ss := sweepStateOf(t, k.reservationKit, r.ID)
			upOpen := uploadAtStore(t, direct, bucket, key, uploadID)
			upState := uploadAttemptState(t, k.reservationKit, r.ID)
			bytesAt := k.atStore(t, key)
			row, inCatalog := catalogOf(t, bucket, key)
			t.Logf("after the crash: %+v, upload at the store %v (%s), bytes at the store %v, catalog %v %+v, put attempt %s",
				ss, upOpen, upState, bytesAt, inCatalog, row, putAttemptState(t, k.reservationKit, r.ID))
			if ss.swept || ss.tries < 1 {
				t.Fatalf("after the crash the reservation is %+v, want claimed, not swept", ss)
			}
			want := map[lease.Step]struct {
				upOpen     bool
				upState    string
				bytesAt    bool
				catalogDel bool // the catalog has the key's deletion
			}{
				lease.StepSweepClaimed:   {true, "open", true, false},
				lease.StepSweepAborted:   {false, "open", true, false},
				lease.StepSweepDeleted:   {false, "aborted", false, false},
				lease.StepSweepCommitted: {false, "aborted", false, true},
			}[fp]
			if upOpen != want.upOpen || upState != want.upState || bytesAt != want.bytesAt || (inCatalog && row.Deleted) != want.catalogDel {
				t.Fatalf("after the crash at %s: upload at the store %v (%s), bytes at the store %v, catalog deleted %v; want %+v",
					fp, upOpen, upState, bytesAt, inCatalog && row.Deleted, want)
			}
			if fp != lease.StepSweepClaimed && (!inCatalog || row.Origin != "adopted" && !row.Deleted) {
				t.Fatalf("after the crash at %s the settle's record of the PUT's bytes is missing: %v %+v", fp, inCatalog, row)
			}
			quotaIs(t, "after the crash")

			// The repairer: every kind, every second.
			n := startGatewayProcess(t, st, envWith(shortLeaseEnv, "FENCEGATE_RECONCILE_INTERVAL=1s")...)
			waitFor(t, "the reservation swept by another gateway", 60*time.Second, func() bool {
				return sweepStateOf(t, k.reservationKit, r.ID).swept
			})
			n.proc.Stop()
			if uploadAtStore(t, direct, bucket, key, uploadID) {
				t.Fatal("swept with the upload still open at the store")
			}
			if s := uploadAttemptState(t, k.reservationKit, r.ID); s != "aborted" {
				t.Fatalf("the upload's attempt is %q, want aborted", s)
			}
			if k.atStore(t, key) {
				t.Fatal("swept with the PUT's bytes still at the store")
			}
			if row, ok := catalogOf(t, bucket, key); ok && !row.Deleted {
				t.Fatalf("swept with the PUT's bytes current in the catalog: %+v", row)
			}
			if got := k.state(t, r.ID); got.State != meta.ReservationCancelled || got.Generation != nil {
				t.Fatalf("the reservation after the repair: %+v", got)
			}
			quotaIs(t, "after the repair")
			if row, ok := catalogOf(t, bucket, "kept"); !ok || row != keptRow || !k.atStore(t, "kept") {
				t.Fatalf("the committed object was touched: %v %+v, was %+v", ok, row, keptRow)
			}
		})
	}
}
