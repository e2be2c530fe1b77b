package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"

	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// reservationKit is a gateway, a bucket and the reservations on its database.
type reservationKit struct {
	g      *testGateway
	rs     *meta.Reservations
	bucket string
}

func newReservationKit(t *testing.T, o gatewayOptions) *reservationKit {
	t.Helper()
	g := startGateway(t, o)
	k := &reservationKit{g: g, rs: &meta.Reservations{Pool: g.Keys.Pool}, bucket: "resv-" + randomSuffix()}
	createBucket(t, g.Endpoint, k.bucket)
	return k
}

// reserve makes a reservation for the gateway's key, with its presigned PUT
// and browser form.
func (k *reservationKit) reserve(t *testing.T, q meta.ReservationRequest) reservations.Reservation {
	t.Helper()
	q.Bucket, q.AccessKeyID = k.bucket, k.g.AccessKey
	if q.TTL == 0 {
		q.TTL = time.Minute
	}
	r, err := k.rs.Create(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	v := reservations.Reservation{ID: r.ID, Bucket: r.Bucket, Key: r.Key, AccessKeyID: r.AccessKeyID, State: r.State,
		ExpiresAt: r.ExpiresAt, SHA256: r.SHA256, CRC32C: r.CRC32C, CRC64NVME: r.CRC64NVME,
		ExactSize: r.ExactSize, MaxSize: r.MaxSize, ContentType: r.ContentType}
	if err := reservations.Presign(&v, k.g.URL, "us-east-1", k.g.SecretKey, time.Now()); err != nil {
		t.Fatal(err)
	}
	return v
}

// putURL sends body to a presigned URL as curl -T would, with headers.
func putURL(url string, body []byte, header map[string]string) rawResult {
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return rawResult{Err: err}
	}
	for h, v := range header {
		req.Header.Set(h, v)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return rawResult{Err: err}
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	res := rawResult{Status: resp.StatusCode, ETag: trimQuotes(resp.Header.Get("ETag"))}
	if i, j := bytes.Index(b, []byte("<Code>")), bytes.Index(b, []byte("</Code>")); i >= 0 && j > i {
		res.Code = string(b[i+6 : j])
	}
	return res
}

func (k *reservationKit) state(t *testing.T, id string) meta.Reservation {
	t.Helper()
	r, err := k.rs.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// published counts the key's generations with bytes.
func (k *reservationKit) published(t *testing.T, key string) int {
	t.Helper()
	var n int
	if err := k.g.Keys.Pool.QueryRow(context.Background(), `SELECT count(*) FROM generations
		WHERE bucket = $1 AND key = $2 AND NOT deleted`, k.bucket, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// atStore reports whether the store itself holds the key.
func (k *reservationKit) atStore(t *testing.T, key string) bool {
	t.Helper()
	_, err := k.g.Store.S3Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &k.bucket, Key: aws.String(key)})
	if err == nil {
		return true
	}
	if !strings.Contains(err.Error(), "NotFound") && !strings.Contains(err.Error(), "404") {
		t.Fatal(err)
	}
	return false
}

func sha256Base64(b []byte) string {
	s := sha256.Sum256(b)
	return base64.StdEncoding.EncodeToString(s[:])
}

// TestReservationPutCommits: a PUT of the presigned URL with the pinned
// checksum publishes once; the reservation is committed with the verified
// size and ETag, its quota moved from reserved to used, and the event
// written; the same URL again is refused and publishes nothing.
func TestReservationPutCommits(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	ctx := context.Background()
	account := "acct-" + randomSuffix()
	if err := k.rs.SetQuota(ctx, account, 100, nil); err != nil {
		t.Fatal(err)
	}
	body := []byte("hello")
	r := k.reserve(t, meta.ReservationRequest{Key: "up/a", Account: account, ExactSize: ptr[int64](5), SHA256: sha256Base64(body)})
	if q, _ := k.rs.GetQuota(ctx, account); q.ReservedBytes != 5 {
		t.Fatalf("reserved %d, want 5", q.ReservedBytes)
	}
	res := putURL(r.PutURL, body, r.PutHeaders)
	if res.Status != 200 {
		t.Fatalf("PUT: %d %s %v", res.Status, res.Code, res.Err)
	}
	got := k.state(t, r.ID)
	if got.State != meta.ReservationCommitted || got.Size == nil || *got.Size != 5 || got.ETag != res.ETag {
		t.Fatalf("after the PUT: %+v (answer ETag %s)", got, res.ETag)
	}
	if q, _ := k.rs.GetQuota(ctx, account); q.ReservedBytes != 0 || q.UsedBytes != 5 {
		t.Fatalf("quota after commit: %+v", q)
	}
	var events int
	_ = k.g.Keys.Pool.QueryRow(ctx, `SELECT count(*) FROM reservation_events WHERE reservation_id = $1 AND event = 'reservation.committed'`, r.ID).Scan(&events)
	if events != 1 {
		t.Fatalf("%d committed events, want 1", events)
	}
	if again := putURL(r.PutURL, body, r.PutHeaders); again.Status != 403 || again.Code != "AccessDenied" {
		t.Fatalf("the URL again: %d %s, want 403 AccessDenied", again.Status, again.Code)
	}
	if n := k.published(t, "up/a"); n != 1 {
		t.Fatalf("%d publications, want 1", n)
	}
	// A plain delete through the gateway takes the object out of the account.
	if res := doRaw(k.g.Endpoint, "DELETE", "/"+k.bucket+"/up/a", nil, nil); res.Status != 204 {
		t.Fatalf("DELETE: %d %s", res.Status, res.Code)
	}
	if q, _ := k.rs.GetQuota(ctx, account); q.UsedBytes != 0 {
		t.Fatalf("used after delete: %d, want 0", q.UsedBytes)
	}
}

// TestReservationPutRefusals: a wrong size, a body that is not the
// reserved checksum, a write without the reservation, a write under the
// reservation by another key, and a write after expiry are each refused
// with S3's error, and none publishes or leaves bytes at the store.
func TestReservationPutRefusals(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	body := []byte("hello")
	r := k.reserve(t, meta.ReservationRequest{Key: "r/sized", ExactSize: ptr[int64](5)})
	m := k.reserve(t, meta.ReservationRequest{Key: "r/max", MaxSize: ptr[int64](5)})
	c := k.reserve(t, meta.ReservationRequest{Key: "r/sum", SHA256: sha256Base64(body)})
	e := k.reserve(t, meta.ReservationRequest{Key: "r/expiring", TTL: time.Second})

	other, err := k.g.Keys.Create(context.Background(), "other", []meta.Grant{{Bucket: "*", Permission: meta.PermWrite}})
	if err != nil {
		t.Fatal(err)
	}
	otherEP := k.g.Endpoint
	otherEP.AccessKey, otherEP.SecretKey = other.ID, other.Secret

	time.Sleep(1500 * time.Millisecond) // e expires
	cases := []struct {
		name, key  string
		do         func() rawResult
		status     int
		code       string
		reservedID string
	}{
		{"longer than exact", "r/sized", func() rawResult { return putURL(r.PutURL, []byte("hello!"), nil) }, 400, "EntityTooLarge", r.ID},
		{"shorter than exact", "r/sized", func() rawResult { return putURL(r.PutURL, []byte("hell"), nil) }, 400, "InvalidArgument", r.ID},
		{"over the maximum", "r/max", func() rawResult { return putURL(m.PutURL, []byte("hello!"), nil) }, 400, "EntityTooLarge", m.ID},
		{"not the reserved bytes", "r/sum", func() rawResult { return putURL(c.PutURL, []byte("jello"), c.PutHeaders) }, 400, "BadDigest", c.ID},
		{"without the reservation", "r/sized", func() rawResult { return putRaw(k.g.Endpoint, k.bucket, "r/sized", body, nil) }, 403, "AccessDenied", r.ID},
		{"another key's reservation", "r/sized", func() rawResult {
			return doRaw(otherEP, "PUT", "/"+k.bucket+"/r/sized?"+reservations.Param+"="+r.ID, body, nil)
		}, 403, "AccessDenied", r.ID},
		{"expired", "r/expiring", func() rawResult { return putURL(e.PutURL, body, nil) }, 403, "AccessDenied", e.ID},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			res := tc.do()
			if res.Status != tc.status || res.Code != tc.code {
				t.Fatalf("%d %s (%v), want %d %s", res.Status, res.Code, res.Err, tc.status, tc.code)
			}
			if n := k.published(t, tc.key); n != 0 {
				t.Fatalf("%d publications, want none", n)
			}
			if k.atStore(t, tc.key) {
				t.Fatal("bytes at the store")
			}
			if st := k.state(t, tc.reservedID).State; st != meta.ReservationReserved {
				t.Fatalf("reservation %s, want still reserved", st)
			}
		})
	}
}

// TestReservationEndedBeforeSend: a PUT admitted under a live reservation
// that waits for its key (another holder has it) while the reservation is
// cancelled is refused when it takes the key: its acquire binds it to the
// reservation in the same transaction and finds it ended (lease.
// ErrReservationEnded), so the attempt ends failed, nothing reaches the
// store, nothing is published, and the client gets 403 AccessDenied. A
// reservation that ends after the acquire bound it is the in-flight case
// (TestReservationEndedBeforeCommit: the commit refuses it).
func TestReservationEndedBeforeSend(t *testing.T) {
	reached := make(chan struct{})
	var once sync.Once
	var bucket string
	k := newReservationKit(t, gatewayOptions{Stream: true, Hooks: lease.Hooks{Waiting: func(b, key string) {
		if b == bucket && key == "held" {
			once.Do(func() { close(reached) })
		}
	}}})
	bucket = k.bucket
	r := k.reserve(t, meta.ReservationRequest{Key: "held", ExactSize: ptr[int64](5)})
	release := k.holdKey(t, "held")
	done := make(chan rawResult, 1)
	go func() { done <- putURL(r.PutURL, []byte("hello"), nil) }()
	within(t, reached, 30*time.Second, "the PUT waiting for its key")
	if _, err := k.rs.End(context.Background(), r.ID, meta.ReservationCancelled); err != nil {
		t.Fatal(err)
	}
	before := k.g.StoreRequests.Load()
	release()
	res := within(t, done, 30*time.Second, "the PUT's answer")
	if res.Status != 403 || res.Code != "AccessDenied" {
		t.Fatalf("PUT: %d %s %v, want 403 AccessDenied", res.Status, res.Code, res.Err)
	}
	if n := k.g.StoreRequests.Load() - before; n != 0 {
		t.Fatalf("%d requests reached the store after the binding was refused", n)
	}
	if n := k.published(t, "held"); n != 0 || k.atStore(t, "held") {
		t.Fatalf("%d publications / bytes at the store after a cancelled reservation", n)
	}
}

// holdKey takes the key's lease as another writer would (a lease manager of
// its own on the gateway's database), so a write through the gateway waits
// for it; release gives it back.
func (k *reservationKit) holdKey(t *testing.T, key string) (release func()) {
	t.Helper()
	m := lease.NewManager(lease.Config{TTL: 30 * time.Second, WaitMax: time.Second, WaitPoll: 20 * time.Millisecond},
		&meta.Catalog{Pool: k.g.Keys.Pool}, nil)
	l, err := m.Acquire(context.Background(), lease.Request{Bucket: k.bucket, Key: key, Op: lease.KindPut, DeclaredSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { l.Finish(lease.StateFailed, "test: the holder gives the key back") }) }
	t.Cleanup(release)
	return release
}

// TestReservationEndedBeforeCommit: a PUT whose bytes the store
// acknowledged, held before its commit while its reservation is cancelled,
// does not commit: the client gets a 500, the reservation stays cancelled
// and nothing of it is in the catalog.
func TestReservationEndedBeforeCommit(t *testing.T) {
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var bucket string
	k := newReservationKit(t, gatewayOptions{Hooks: lease.Hooks{BeforeCommit: func(b, key, _ string) {
		if b == bucket && key == "late" {
			once.Do(func() { close(reached); <-release })
		}
	}}})
	bucket = k.bucket
	r := k.reserve(t, meta.ReservationRequest{Key: "late", ExactSize: ptr[int64](5)})
	done := make(chan rawResult, 1)
	go func() { done <- putURL(r.PutURL, []byte("hello"), nil) }()
	within(t, reached, 30*time.Second, "the PUT before its commit")
	if _, err := k.rs.End(context.Background(), r.ID, meta.ReservationCancelled); err != nil {
		t.Fatal(err)
	}
	close(release)
	res := within(t, done, 30*time.Second, "the PUT's answer")
	if res.Status != 500 {
		t.Fatalf("PUT: %d %s %v, want 500", res.Status, res.Code, res.Err)
	}
	if st := k.state(t, r.ID).State; st != meta.ReservationCancelled {
		t.Fatalf("reservation %s, want cancelled", st)
	}
	if n := k.published(t, "late"); n != 0 {
		t.Fatalf("%d publications, want none", n)
	}
}

// TestReservationConcurrentPutsPublishOnce: eight PUTs of one reservation's
// URL at once publish exactly one generation.
func TestReservationConcurrentPutsPublishOnce(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	r := k.reserve(t, meta.ReservationRequest{Key: "once", ExactSize: ptr[int64](5)})
	var wg sync.WaitGroup
	results := make([]rawResult, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = putURL(r.PutURL, []byte("hello"), nil)
		}()
	}
	wg.Wait()
	ok := 0
	for _, res := range results {
		if res.Status == 200 {
			ok++
		}
	}
	if ok != 1 || k.published(t, "once") != 1 || k.state(t, r.ID).State != meta.ReservationCommitted {
		t.Fatalf("%d PUTs succeeded, %d publications (%+v)", ok, k.published(t, "once"), results)
	}
}

func ptr[T any](v T) *T { return &v }

// TestReservationSweeperExpires: the gateway's lifecycle service ends an
// expired reservation (quota released, event written), and its URL is
// refused afterwards.
func TestReservationSweeperExpires(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{Reconcile: 100 * time.Millisecond,
		Lifecycle: &lease.LifecycleConfig{Kinds: []string{lease.KindReservations}}})
	ctx := context.Background()
	account := "sweep-" + randomSuffix()
	if err := k.rs.SetQuota(ctx, account, 10, nil); err != nil {
		t.Fatal(err)
	}
	r := k.reserve(t, meta.ReservationRequest{Key: "swept", Account: account, ExactSize: ptr[int64](5), TTL: time.Second})
	waitFor(t, "the sweeper to expire the reservation", 10*time.Second, func() bool {
		return k.state(t, r.ID).State == meta.ReservationExpired
	})
	if q, _ := k.rs.GetQuota(ctx, account); q.ReservedBytes != 0 {
		t.Fatalf("reserved %d after expiry, want 0", q.ReservedBytes)
	}
	if res := putURL(r.PutURL, []byte("hello"), nil); res.Status != 403 || k.published(t, "swept") != 0 {
		t.Fatalf("PUT after the sweep: %d %s", res.Status, res.Code)
	}
}

// TestReservationAPI: the HTTP API through the Go client, with a key that
// holds only reserve:BUCKET: create, the presigned PUT, get once
// committed, idempotency (same request: same reservation; another: 409),
// list, cancel; a key without the grant, malformed JSON, an unknown id and
// over-quota each get their JSON error and reserve nothing.
func TestReservationAPI(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	ctx := context.Background()
	reserver, err := k.g.Keys.Create(ctx, "reserver", []meta.Grant{{Bucket: k.bucket, Permission: meta.PermReserve}})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := k.g.Keys.Create(ctx, "reader", []meta.Grant{{Bucket: k.bucket, Permission: meta.PermRead}})
	if err != nil {
		t.Fatal(err)
	}
	account := "api-" + randomSuffix()
	if err := k.rs.SetQuota(ctx, account, 10, nil); err != nil {
		t.Fatal(err)
	}
	c := &reservations.Client{Endpoint: k.g.URL, AccessKey: reserver.ID, SecretKey: reserver.Secret}
	q := reservations.CreateRequest{Bucket: k.bucket, Prefix: "api/", Size: ptr[int64](5), Account: account,
		IdempotencyKey: "one", Metadata: []byte(`{"user":1}`)}
	r, err := c.Create(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if r.Key != "api/one" || r.State != reservations.Reserved || r.PutURL == "" {
		t.Fatalf("created %+v", r)
	}
	if again, err := c.Create(ctx, q); err != nil || again.ID != r.ID {
		t.Fatalf("repeat: %v %s", err, again.ID)
	}
	q2 := q
	q2.Size = ptr[int64](6)
	if _, err := c.Create(ctx, q2); !errors.Is(err, reservations.ErrIdempotencyReuse) {
		t.Fatalf("another request with the key: %v, want 409 IdempotencyKeyReused", err)
	}
	if res := putURL(r.PutURL, []byte("hello"), nil); res.Status != 200 {
		t.Fatalf("PUT: %d %s", res.Status, res.Code)
	}
	got, err := c.Get(ctx, r.ID)
	if err != nil || got.State != reservations.Committed || got.Size == nil || *got.Size != 5 || got.ETag == "" {
		t.Fatalf("get: %v %+v", err, got)
	}
	if _, err := c.Create(ctx, reservations.CreateRequest{Bucket: k.bucket, Key: "big", Size: ptr[int64](6), Account: account}); !errors.Is(err, reservations.ErrQuotaExceeded) {
		t.Fatalf("over quota: %v", err)
	}
	live, err := c.Create(ctx, reservations.CreateRequest{Bucket: k.bucket, Key: "to-cancel", MaxSize: ptr[int64](5), Account: account})
	if err != nil {
		t.Fatal(err)
	}
	if all, err := c.List(ctx, k.bucket); err != nil || len(all) != 2 {
		t.Fatalf("list: %v, %d reservations", err, len(all))
	}
	if got, err := c.Cancel(ctx, live.ID); err != nil || got.State != reservations.Cancelled {
		t.Fatalf("cancel: %v %+v", err, got)
	}
	if _, err := c.Cancel(ctx, live.ID); !errors.Is(err, reservations.ErrNotLive) {
		t.Fatalf("second cancel: %v", err)
	}
	if _, err := c.Get(ctx, "00000000-0000-4000-8000-000000000000"); !errors.Is(err, reservations.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	noGrant := &reservations.Client{Endpoint: k.g.URL, AccessKey: reader.ID, SecretKey: reader.Secret}
	if _, err := noGrant.Create(ctx, reservations.CreateRequest{Bucket: k.bucket, Key: "nope"}); !errors.Is(err, reservations.ErrAccessDenied) {
		t.Fatalf("without the grant: %v", err)
	}
	if _, err := noGrant.Get(ctx, r.ID); !errors.Is(err, reservations.ErrNotFound) {
		t.Fatalf("another key's reservation: %v", err)
	}
	if res, body := doRawBody(k.g.Endpoint, "POST", reservations.APIPath, []byte(`{"bucket":`), nil); res.Status != 400 || !strings.Contains(string(body), "InvalidRequest") {
		t.Fatalf("malformed JSON: %d %s", res.Status, body)
	}
	if _, ok, _ := k.rs.Live(ctx, k.bucket, "nope"); ok {
		t.Fatal("a refused create reserved the key")
	}
}

// TestReservationSweeperDeletesLateBytes: a PUT validated before its
// reservation ended, whose bytes reached the store and whose commit came
// after the end (held there), publishes nothing under the reservation; the
// lifecycle service then settles the key (recording the bytes it finds) and
// the reservations kind deletes them, fenced, as a delete generation: no
// object is left, and the reservation stays cancelled.
func TestReservationSweeperDeletesLateBytes(t *testing.T) {
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var bucket string
	k := newReservationKit(t, gatewayOptions{Reconcile: 200 * time.Millisecond,
		Lifecycle: &lease.LifecycleConfig{Kinds: []string{lease.KindUnresolved, lease.KindReservations}},
		Hooks: lease.Hooks{BeforeCommit: func(b, key, _ string) {
			if b == bucket && key == "late" {
				once.Do(func() { close(reached); <-release })
			}
		}}})
	bucket = k.bucket
	r := k.reserve(t, meta.ReservationRequest{Key: "late", ExactSize: ptr[int64](5)})
	done := make(chan rawResult, 1)
	go func() { done <- putURL(r.PutURL, []byte("hello"), nil) }()
	within(t, reached, 30*time.Second, "the PUT before its commit")
	if !k.atStore(t, "late") {
		t.Fatal("the held PUT's bytes are not at the store")
	}
	if _, err := k.rs.End(context.Background(), r.ID, meta.ReservationCancelled); err != nil {
		t.Fatal(err)
	}
	close(release)
	if res := within(t, done, 30*time.Second, "the PUT's answer"); res.Status != 500 {
		t.Fatalf("PUT: %d %s %v, want 500", res.Status, res.Code, res.Err)
	}
	// The sweep's delete generation commits after the store's DELETE: wait
	// for both.
	deletedInCatalog := func() bool {
		var deleted bool
		err := k.g.Keys.Pool.QueryRow(context.Background(), `SELECT deleted FROM catalog WHERE bucket = $1 AND key = 'late'`,
			k.bucket).Scan(&deleted)
		return err == nil && deleted
	}
	waitFor(t, "the sweeper to delete the late bytes", 20*time.Second, func() bool { return !k.atStore(t, "late") && deletedInCatalog() })
	var swept bool
	if err := k.g.Keys.Pool.QueryRow(context.Background(), `SELECT swept_at IS NOT NULL FROM reservations WHERE reservation_id = $1`,
		r.ID).Scan(&swept); err != nil || !swept {
		waitFor(t, "the reservation marked swept", 5*time.Second, func() bool {
			_ = k.g.Keys.Pool.QueryRow(context.Background(), `SELECT swept_at IS NOT NULL FROM reservations WHERE reservation_id = $1`, r.ID).Scan(&swept)
			return swept
		})
	}
	if st := k.state(t, r.ID).State; st != meta.ReservationCancelled {
		t.Fatalf("reservation %s, want cancelled", st)
	}
}

// TestReservationRefusesFormPost: a browser form to a reserved key (its key
// named in the form, unseen at admission) is refused before its file is
// read, and nothing lands.
func TestReservationRefusesFormPost(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	k.reserve(t, meta.ReservationRequest{Key: "form/a.txt", ExactSize: ptr[int64](5)})
	fields := append([]formField{{"key", "form/a.txt"}}, postPolicy(k.g.Endpoint, time.Now().Add(time.Hour),
		map[string]string{"bucket": k.bucket}, []any{"starts-with", "$key", "form/"})...)
	resp, body := postForm(t, k.g.URL, k.bucket, fields, "a.txt", []byte("hello"))
	if resp.StatusCode != http.StatusForbidden || errorCode(body) != "AccessDenied" {
		t.Fatalf("POST: %s %s, want 403 AccessDenied", resp.Status, body)
	}
	if k.published(t, "form/a.txt") != 0 || k.atStore(t, "form/a.txt") {
		t.Fatal("the form's file landed")
	}
}

// The reservation API answers 503 ServiceUnavailable, as S3 calls do, when
// the gateway cannot reach its database: a failure to retry, not the
// gateway's own error (500).
func TestReservationAPIWithoutDatabaseIs503(t *testing.T) {
	proxy, dbURL := faultDatabase(t)
	k := newReservationKit(t, gatewayOptions{DatabaseURL: dbURL})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reserver, err := k.g.Keys.Create(ctx, "reserver", []meta.Grant{{Bucket: k.bucket, Permission: meta.PermReserve}})
	if err != nil {
		t.Fatal(err)
	}
	c := &reservations.Client{Endpoint: k.g.URL, AccessKey: reserver.ID, SecretKey: reserver.Secret}
	q := reservations.CreateRequest{Bucket: k.bucket, Prefix: "down/", Size: ptr[int64](5)}
	if _, err := c.Create(ctx, q); err != nil {
		t.Fatalf("with the database: %v", err)
	}
	proxy.Blackhole(true)
	proxy.CutAll()
	_, err = c.Create(ctx, q)
	var ae *reservations.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Code != "ServiceUnavailable" {
		t.Fatalf("create without the database: %v (%+v), want 503 ServiceUnavailable", err, ae)
	}
	proxy.Blackhole(false)
}
