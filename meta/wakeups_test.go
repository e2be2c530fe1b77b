package meta

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// listener runs ListenReleases on c until the test ends and reports its
// events.
type listener struct {
	ups    chan bool
	hashes chan string
}

func listen(t *testing.T, c *Catalog) *listener {
	t.Helper()
	l := &listener{ups: make(chan bool, 16), hashes: make(chan string, 64)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.ListenReleases(ctx, func(up bool) { l.ups <- up }, func(h string) { l.hashes <- h })
	}()
	t.Cleanup(func() { cancel(); <-done })
	l.expectUp(t, true)
	return l
}

func (l *listener) expectUp(t *testing.T, want bool) {
	t.Helper()
	select {
	case up := <-l.ups:
		if up != want {
			t.Fatalf("listener up = %v, want %v", up, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the listener never reported up = %v", want)
	}
}

// next is the next notification received.
func (l *listener) next(t *testing.T) string {
	t.Helper()
	select {
	case h := <-l.hashes:
		return h
	case <-time.After(30 * time.Second):
		t.Fatal("no notification")
		return ""
	}
}

func wakeupMark(t *testing.T, c *Catalog, bucket, key string) *string {
	t.Helper()
	var mark *string
	if err := c.Pool.QueryRow(context.Background(), `SELECT wakeup FROM leases WHERE bucket = $1 AND key = $2`,
		bucket, key).Scan(&mark); err != nil {
		t.Fatal(err)
	}
	return mark
}

// acquire takes or tries (bucket, key) for a new attempt of gateway gw; wait
// says whether the writer would wait.
func acquire(t *testing.T, c *Catalog, bucket, key, gw string, wait bool) (string, bool) {
	t.Helper()
	id := lease.NewID()
	acq, err := c.Acquire(context.Background(), lease.AcquireParams{Bucket: bucket, Key: key, TTL: time.Minute, Wait: wait,
		Attempt: lease.Attempt{ID: id, Op: "put", Gateway: gw, DeclaredSize: 1}})
	var held *lease.Held
	if errors.As(err, &held) {
		return id, false
	}
	if err != nil || acq == nil {
		t.Fatalf("acquire: %v %v", acq, err)
	}
	return id, true
}

// A release is announced exactly when a writer of another gateway waits
// for the key: the waiter's refused acquire marks the row, the release
// notifies (payload KeyHash) and clears the mark. Unmarked keys, keys whose
// only waiters are the releaser's own gateway's, and refusals of writers
// that would not wait send nothing. Notifications reach a listener in
// commit order, so "nothing sent" is proven by the next one received being
// a later release's.
func TestReleaseNotifiesWaitersOfOtherGateways(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	ctx := context.Background()
	l := listen(t, c)
	bucket := "wake-" + lease.NewID()[:8]
	gwA, gwB := "gw-a-"+lease.NewID()[:8], "gw-b-"+lease.NewID()[:8]
	end := lease.Ending{State: lease.StateFailed, Reason: "test"}

	// Marked by a waiter of gateway B, released by A's holder (Release).
	holder, ok := acquire(t, c, bucket, "marked", gwA, false)
	if !ok {
		t.Fatal("the first acquire was refused")
	}
	if _, ok := acquire(t, c, bucket, "marked", gwB, true); ok {
		t.Fatal("a second holder got the key")
	}
	if m := wakeupMark(t, c, bucket, "marked"); m == nil || *m != gwB {
		t.Fatalf("mark %v, want %s", m, gwB)
	}
	if err := c.Release(ctx, bucket, "marked", holder, end); err != nil {
		t.Fatal(err)
	}
	if h := l.next(t); h != lease.KeyHash(bucket, "marked") {
		t.Fatalf("notified %q, want %q", h, lease.KeyHash(bucket, "marked"))
	}
	if m := wakeupMark(t, c, bucket, "marked"); m != nil {
		t.Fatalf("the release left the mark %q", *m)
	}

	// Nothing is announced for: a key nobody waits for; a key only the
	// releaser's own gateway waits for; a refused writer that would not
	// wait (a conditional writer, the reconciler).
	quiet := func(key string, waiters ...string) {
		t.Helper()
		holder, ok := acquire(t, c, bucket, key, gwA, false)
		if !ok {
			t.Fatalf("%s: the first acquire was refused", key)
		}
		for _, gw := range waiters {
			acquire(t, c, bucket, key, gw, gw != "no-wait")
		}
		if err := c.Release(ctx, bucket, key, holder, end); err != nil {
			t.Fatal(err)
		}
	}
	quiet("nobody")
	quiet("own", gwA, gwA)
	quiet("no-wait", "no-wait")

	// Waiters of both gateways ('*'), released by A's commit: announced.
	holder, _ = acquire(t, c, bucket, "both", gwA, false)
	acquire(t, c, bucket, "both", gwA, true)
	acquire(t, c, bucket, "both", gwB, true)
	if m := wakeupMark(t, c, bucket, "both"); m == nil || *m != "*" {
		t.Fatalf("mark %v, want *", m)
	}
	if _, err := c.Commit(ctx, lease.CommitParams{Bucket: bucket, Key: "both", Holder: holder, Settled: holder,
		SettledState: lease.StateCommitted, Entry: lease.Entry{ETag: "e", Size: 1, AttemptID: holder, Origin: lease.OriginFencegate},
		Release: true}); err != nil {
		t.Fatal(err)
	}
	if h := l.next(t); h != lease.KeyHash(bucket, "both") {
		t.Fatalf("notified %q, want b/both's %q (nothing for the quiet keys)", h, lease.KeyHash(bucket, "both"))
	}

	// A takeover keeps the mark: the new holder's release is announced.
	// (The mark says someone elsewhere still waits.)
	acquire(t, c, bucket, "taken", gwA, false)
	acquire(t, c, bucket, "taken", gwB, true)
	if _, err := c.Pool.Exec(ctx, `UPDATE leases SET expires_at = clock_timestamp() - interval '1 second'
		WHERE bucket = $1 AND key = 'taken'`, bucket); err != nil {
		t.Fatal(err)
	}
	taker, ok := acquire(t, c, bucket, "taken", gwA, false)
	if !ok {
		t.Fatal("the expired lease was not taken over")
	}
	if m := wakeupMark(t, c, bucket, "taken"); m == nil || *m != gwB {
		t.Fatalf("after the takeover: mark %v, want %s", m, gwB)
	}
	if err := c.Release(ctx, bucket, "taken", taker, end); err != nil {
		t.Fatal(err)
	}
	if h := l.next(t); h != lease.KeyHash(bucket, "taken") {
		t.Fatalf("notified %q, want %q", h, lease.KeyHash(bucket, "taken"))
	}

	// The SQL hash is meta.KeyHash, for any key bytes.
	for _, key := range []string{"k", "ünï/cødé ✓", "a%2Fb+c", string([]byte{0xe2, 0x82, 0xac})} {
		var got string
		if err := c.Pool.QueryRow(ctx, `SELECT fencegate_key_hash($1, $2)`, bucket, key).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != lease.KeyHash(bucket, key) {
			t.Fatalf("fencegate_key_hash(%q) = %s, KeyHash = %s", key, got, lease.KeyHash(bucket, key))
		}
	}
}

// Two writers racing to create a key's lease row: the loser reads the
// winner's row like any held key, and marks it.
func TestAcquireLosingTheInsertRaceMarks(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	ctx := context.Background()
	bucket := "wake-race-" + lease.NewID()[:8]
	gwA, gwB := "gw-a-"+lease.NewID()[:8], "gw-b-"+lease.NewID()[:8]
	// The winner inserts the row in an open transaction; the loser's insert
	// waits for it, then finds the row.
	tx, err := c.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	winner := lease.NewID()
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT acquired FROM fencegate_acquire($1, 'k', $2, '1 minute', 'new', 'put', $3, 1, '', NULL, NULL, false)`,
		bucket, winner, gwA).Scan(&ok); err != nil || !ok {
		t.Fatalf("winner: %v %v", ok, err)
	}
	type res struct {
		ok  bool
		err error
	}
	lost := make(chan res, 1)
	go func() {
		acq, err := c.Acquire(ctx, lease.AcquireParams{Bucket: bucket, Key: "k", TTL: time.Minute, Wait: true,
			Attempt: lease.Attempt{ID: lease.NewID(), Op: "put", Gateway: gwB, DeclaredSize: 1}})
		var held *lease.Held
		if errors.As(err, &held) {
			err = nil
		}
		lost <- res{acq != nil, err}
	}()
	// The loser blocks on the winner's uncommitted row.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := c.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%fencegate_acquire%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second acquire never waited for the first's insert")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-lost
	if r.err != nil || r.ok {
		t.Fatalf("the loser: acquired %v, err %v; want refused", r.ok, r.err)
	}
	if m := wakeupMark(t, c, bucket, "k"); m == nil || *m != gwB {
		t.Fatalf("mark %v, want the loser's gateway %s", m, gwB)
	}
}

// The listener's connection killed by the server (as by a restart): it
// reports the loss, reconnects and is subscribed again.
func TestListenerReconnects(t *testing.T) {
	pool := migratedPool(t)
	c := &Catalog{Pool: pool}
	ctx := context.Background()
	l := listen(t, c)
	killed := 0
	deadline := time.Now().Add(30 * time.Second)
	for killed == 0 {
		if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND query = 'LISTEN `+ReleaseChannel+`'`).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if killed == 0 && time.Now().After(deadline) {
			t.Fatal("the listener's backend was not found")
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.expectUp(t, false)
	l.expectUp(t, true)
	bucket := "wake-reconnect-" + lease.NewID()[:8]
	holder, _ := acquire(t, c, bucket, "k", "gw-a", false)
	acquire(t, c, bucket, "k", "gw-b", true)
	if err := c.Release(ctx, bucket, "k", holder, lease.Ending{}); err != nil {
		t.Fatal(err)
	}
	if h := l.next(t); h != lease.KeyHash(bucket, "k") {
		t.Fatalf("after the reconnect: notified %q, want %q", h, lease.KeyHash(bucket, "k"))
	}
}

// A refusal says how long the holder stays live at most: its lease's expiry,
// or its session's when that comes first.
func TestRefusalSaysHowLongTheHolderLives(t *testing.T) {
	c := &Catalog{Pool: migratedPool(t)}
	ctx := context.Background()
	bucket := "wake-live-" + lease.NewID()[:8]
	sess, err := c.OpenSession(ctx, "gw-live", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.EndSession(ctx, sess)
	for _, tc := range []struct {
		key, session string
		lo, hi       time.Duration
	}{
		{"own-expiry", "", 50 * time.Second, time.Minute},
		{"session", sess, 5 * time.Second, 10 * time.Second},
	} {
		if _, err := c.Acquire(ctx, lease.AcquireParams{Bucket: bucket, Key: tc.key, TTL: time.Minute, Session: tc.session,
			Attempt: lease.Attempt{ID: lease.NewID(), Op: "put", Gateway: "gw-live", DeclaredSize: 1}}); err != nil {
			t.Fatal(err)
		}
		_, err := c.Acquire(ctx, lease.AcquireParams{Bucket: bucket, Key: tc.key, TTL: time.Minute,
			Attempt: lease.Attempt{ID: lease.NewID(), Op: "put", Gateway: "gw-other", DeclaredSize: 1}})
		var held *lease.Held
		if !errors.As(err, &held) {
			t.Fatalf("%s: a second acquire: %v, want *lease.Held", tc.key, err)
		}
		if held.LiveFor <= tc.lo || held.LiveFor > tc.hi {
			t.Fatalf("%s: the holder lives %s more, want within (%s, %s]", tc.key, held.LiveFor, tc.lo, tc.hi)
		}
	}
}
