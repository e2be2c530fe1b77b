package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/notify"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// fastNotifyEnv makes a gateway process deliver with short timeouts and
// back-offs, so a forced test takes seconds.
var fastNotifyEnv = []string{"FENCEGATE_NOTIFY_TIMEOUT=300ms", "FENCEGATE_NOTIFY_RETRY=20ms", "FENCEGATE_NOTIFY_RETRY_MAX=200ms",
	"FENCEGATE_NOTIFY_POLL=50ms", "FENCEGATE_NOTIFY_MAX_TRIES=1000", "FENCEGATE_NOTIFY_CLAIM=2s"}

// gotEvent is one event a consumer received.
type gotEvent struct {
	Key, ID, Name, Sequencer string
	Generation               int64
	Acked                    bool      // answered 2xx in time (webhook) / in the stream (NATS)
	CommittedAt, At          time.Time // the event's eventTime; when the receiver got it
}

// parseEvent reads S3's {"Records":[...]} format.
func parseEvent(t *testing.T, body []byte) gotEvent {
	t.Helper()
	var doc struct {
		Records []struct {
			EventVersion string `json:"eventVersion"`
			EventSource  string `json:"eventSource"`
			EventName    string `json:"eventName"`
			EventTime    string `json:"eventTime"`
			S3           struct {
				Object struct {
					Key       string `json:"key"`
					Sequencer string `json:"sequencer"`
				} `json:"object"`
			} `json:"s3"`
			Fencegate struct {
				EventID    string `json:"eventId"`
				Generation int64  `json:"generation"`
			} `json:"fencegate"`
		}
	}
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Records) != 1 {
		t.Errorf("event body %s: %v", body, err)
		return gotEvent{}
	}
	r := doc.Records[0]
	key, err := url.QueryUnescape(r.S3.Object.Key)
	if err != nil {
		t.Errorf("event key %q: %v", r.S3.Object.Key, err)
	}
	if r.EventVersion != "2.1" || r.EventSource != "fencegate:s3" || r.EventTime == "" {
		t.Errorf("event header: %s", body)
	}
	at, _ := time.Parse(time.RFC3339Nano, r.EventTime)
	return gotEvent{Key: key, ID: r.Fencegate.EventID, Name: r.EventName, Generation: r.Fencegate.Generation, Sequencer: r.S3.Object.Sequencer,
		CommittedAt: at, At: time.Now()}
}

// flakyReceiver is a webhook endpoint on a fixed address that can be stopped
// and started again, answers 500 or stalls past the sender's timeout as
// answer(n) says for its n-th request, and records every request it got.
type flakyReceiver struct {
	t      *testing.T
	addr   string
	secret string
	answer func(n int64) (status int, stall time.Duration)
	n      atomic.Int64
	mu     sync.Mutex
	// byKey, when set (under mu), answers the events of the keys it knows
	// (ok) in answer's stead.
	byKey  func(key string) (status int, stall time.Duration, ok bool)
	srv    *http.Server
	got    []gotEvent
	badSig int
}

func startFlakyReceiver(t *testing.T, secret string, answer func(n int64) (int, time.Duration)) *flakyReceiver {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &flakyReceiver{t: t, addr: ln.Addr().String(), secret: secret, answer: answer}
	r.serve(ln)
	t.Cleanup(r.stop)
	return r
}

func (r *flakyReceiver) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		ev := parseEvent(r.t, body)
		status, stall := r.answer(r.n.Add(1))
		r.mu.Lock()
		if r.byKey != nil {
			if st, sl, ok := r.byKey(ev.Key); ok {
				status, stall = st, sl
			}
		}
		if req.Header.Get(notify.SignatureHeader) != notify.Sign(r.secret, body) {
			r.badSig++
		}
		i := len(r.got)
		r.got = append(r.got, ev)
		r.mu.Unlock()
		if stall > 0 {
			select {
			case <-time.After(stall):
			case <-req.Context().Done():
				return
			}
		}
		w.WriteHeader(status)
		if status/100 == 2 && stall == 0 {
			r.mu.Lock()
			r.got[i].Acked = true
			r.mu.Unlock()
		}
	})}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (r *flakyReceiver) stop() {
	r.mu.Lock()
	srv := r.srv
	r.mu.Unlock()
	_ = srv.Close()
}

// restart stops the receiver, leaves it down for a while, and starts it again
// on the same address.
func (r *flakyReceiver) restart(down time.Duration) {
	r.stop()
	time.Sleep(down)
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	r.serve(ln)
}

func (r *flakyReceiver) events() []gotEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gotEvent(nil), r.got...)
}

type committedEvent struct {
	Key        string
	Generation int64
	Deleted    bool
}

// committedEvents is every generation the catalog committed in bucket.
func committedEvents(t *testing.T, bucket string) map[string]committedEvent {
	t.Helper()
	rows, err := packageKeys(t).Pool.Query(context.Background(), `SELECT key, generation, deleted FROM generations WHERE bucket = $1`, bucket)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]committedEvent{}
	for rows.Next() {
		var c committedEvent
		if err := rows.Scan(&c.Key, &c.Generation, &c.Deleted); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("%s@%d", c.Key, c.Generation)] = c
	}
	return out
}

// mixedWorkload runs writers PUTting and deleting keys of bucket through ep
// for d, each at most one request per pace (0: back to back); it returns how
// many requests succeeded. A test whose receiver is slow on purpose paces its
// writers: back to back, the events a faster machine commits in d could take
// longer to deliver than the test waits (a key's events go one at a time, each after
// the answer to the one before).
func mixedWorkload(t *testing.T, ep stack.Endpoint, bucket string, writers, keys int, d, pace time.Duration, during func()) int64 {
	t.Helper()
	var ok atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	client := ep.S3Client()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				next := time.Now().Add(pace)
				key := fmt.Sprintf("k %d/obj-%d", (w+i)%keys, (w+i)%keys)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var err error
				if i%5 == 4 {
					_, err = client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(key)})
				} else {
					_, err = client.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(key), Body: bytes.NewReader([]byte(key + fmt.Sprint(i)))})
				}
				cancel()
				if err == nil {
					ok.Add(1)
				}
				time.Sleep(time.Until(next))
			}
		}()
	}
	if during != nil {
		during()
	}
	wg.Wait()
	return ok.Load()
}

// checkDelivered: every committed event of bucket (but those in skip) was
// received and acknowledged at least once; nothing was received that was not
// committed; each key's events arrived in generation order (a resend
// repeats the last one, never goes back past a later one). It returns the
// duplicates.
func checkDelivered(t *testing.T, committed map[string]committedEvent, got []gotEvent, skipKey string) int {
	t.Helper()
	acked := map[string]bool{}
	seen := map[string]int{}
	last := map[string]int64{}
	for _, e := range got {
		id := fmt.Sprintf("%s@%d", e.Key, e.Generation)
		c, ok := committed[id]
		if !ok {
			t.Errorf("received an event that was never committed: %+v", e)
			continue
		}
		wantName := "ObjectCreated:Put"
		if c.Deleted {
			wantName = "ObjectRemoved:Delete"
		}
		if e.Name != wantName || e.Sequencer != fmt.Sprintf("%016X", e.Generation) {
			t.Errorf("event %s: name %s sequencer %s, want %s", id, e.Name, e.Sequencer, wantName)
		}
		if e.Generation < last[e.Key] {
			var seq []string
			for _, x := range got {
				if x.Key == e.Key {
					seq = append(seq, fmt.Sprintf("%d#%s%s", x.Generation, x.ID, map[bool]string{true: "+", false: "-"}[x.Acked]))
				}
			}
			t.Errorf("key %q: generation %d arrived after %d; the key's arrivals: %s", e.Key, e.Generation, last[e.Key], strings.Join(seq, " "))
		}
		last[e.Key] = e.Generation
		seen[id]++
		if e.Acked {
			acked[id] = true
		}
	}
	missing := 0
	for id, c := range committed {
		if c.Key == skipKey {
			if seen[id] > 0 {
				t.Errorf("%s was committed before the configuration and still delivered", id)
			}
			continue
		}
		if !acked[id] {
			missing++
			if missing < 5 {
				t.Errorf("committed event %s never acknowledged (received %d times)", id, seen[id])
			}
		}
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	return dups
}

// configureBucket points bucket's ObjectCreated and ObjectRemoved events at arn.
func configureBucket(t *testing.T, ep stack.Endpoint, bucket, arn string) {
	t.Helper()
	doc := notificationDoc(queueEntry("all", arn, "", "", "s3:ObjectCreated:*", "s3:ObjectRemoved:*"))
	if res := doRaw(ep, "PUT", "/"+bucket+"?notification", doc, nil); res.Status != 200 {
		t.Fatalf("configure %s: %d %s", bucket, res.Status, res.Code)
	}
}

func queueEmpty(t *testing.T, target string) bool { return queued(t, target, "") == 0 }

// queued is how many events target's queue holds: key's, or all if key is "".
func queued(t *testing.T, target, key string) int {
	t.Helper()
	var n int
	if err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT count(*) FROM notify_queue WHERE target = $1 AND ($2 = '' OR key = $2)`,
		target, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A webhook that answers 500 to a third of the requests, stalls past the
// timeout on some, and is restarted twice mid-workload: every committed event
// is acknowledged at least once, each key's in generation order, signed; none
// that was not committed arrives; one committed before the bucket's
// configuration is not sent.
func TestNotifyWebhookFlakyReceiver(t *testing.T) {
	store := testenv.Store(t)
	g := startGatewayProcess(t, store, fastNotifyEnv...)
	bucket := "t-notify-wh-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	secret := "hook-secret-" + randomSuffix()
	rcv := startFlakyReceiver(t, secret, func(n int64) (int, time.Duration) {
		switch {
		case n%3 == 0:
			return 500, 0
		case n%7 == 0:
			return 200, time.Second // past the 300 ms timeout: a failed try, and a duplicate
		}
		return 200, 0
	})
	tg := addTarget(t, "webhook", "flaky-"+randomSuffix(), "--url", "http://"+rcv.addr+"/events", "--secret", secret)
	before := "before-config"
	if res := putRaw(g.Endpoint, bucket, before, []byte("x"), nil); res.Status != 200 {
		t.Fatalf("PUT before the configuration: %d", res.Status)
	}
	configureBucket(t, g.Endpoint, bucket, tg.ARN)

	n := mixedWorkload(t, g.Endpoint, bucket, 6, 8, 4*time.Second, 50*time.Millisecond, func() {
		time.Sleep(time.Second)
		rcv.restart(500 * time.Millisecond)
		time.Sleep(time.Second)
		rcv.restart(500 * time.Millisecond)
	})
	committed := committedEvents(t, bucket)
	waitFor(t, "the target's queue to drain", 60*time.Second, func() bool { return queueEmpty(t, tg.Name) })
	got := rcv.events()
	dups := checkDelivered(t, committed, got, before)
	rcv.mu.Lock()
	bad := rcv.badSig
	rcv.mu.Unlock()
	if bad > 0 {
		t.Errorf("%d requests without a valid %s", bad, notify.SignatureHeader)
	}
	t.Logf("%d writes answered, %d events committed, %d requests received, %d duplicates", n, len(committed), len(got), dups)
	if len(committed) < 50 {
		t.Fatalf("only %d events committed: the workload did not run", len(committed))
	}
	if t.Failed() {
		t.Logf("gateway log:\n%s", g.proc.LogTail())
	}
}

// A gateway killed while it delivers: the other gateway takes the target's
// claim over once the killed gateway's session expires (10 s), although the
// claim itself would last 10 minutes, and every committed event is still
// delivered.
func TestNotifyGatewayKilledMidDelivery(t *testing.T) {
	store := testenv.Store(t)
	env := append(slices.Clone(fastNotifyEnv), "FENCEGATE_NOTIFY_CLAIM=10m")
	gA := startGatewayProcess(t, store, env...)
	gB := startGatewayProcess(t, store, env...)
	bucket := "t-notify-kill-" + randomSuffix()
	createBucket(t, gA.Endpoint, bucket)
	// A slow receiver, so the kill lands mid-delivery.
	rcv := startFlakyReceiver(t, "", func(int64) (int, time.Duration) { return 200, 0 })
	rcv.answer = func(int64) (int, time.Duration) { time.Sleep(20 * time.Millisecond); return 200, 0 }
	tg := addTarget(t, "webhook", "kill-"+randomSuffix(), "--url", "http://"+rcv.addr+"/")
	configureBucket(t, gA.Endpoint, bucket, tg.ARN)
	mixedWorkload(t, gA.Endpoint, bucket, 4, 40, 2*time.Second, 0, nil)

	// Whoever holds the claim is killed as soon as it has delivered some.
	waitFor(t, "deliveries to start", 20*time.Second, func() bool { return len(rcv.events()) > 10 })
	var holderGateway string
	if err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT s.gateway FROM notify_claims c JOIN sessions s ON s.session_id = c.holder
		WHERE c.target = $1`, tg.Name).Scan(&holderGateway); err != nil {
		t.Fatal(err)
	}
	victim, survivor := gA, gB
	if strings.Contains(holderGateway, fmt.Sprintf("/%d/", gB.proc.Pid())) {
		victim, survivor = gB, gA
	} else if !strings.Contains(holderGateway, fmt.Sprintf("/%d/", gA.proc.Pid())) {
		t.Fatalf("the claim's holder %s is neither gateway", holderGateway)
	}
	if queueEmpty(t, tg.Name) {
		t.Fatal("everything was delivered before the kill; the test shows nothing")
	}
	sigkillGateway(t, victim)
	killedAt := time.Now()
	// The survivor writes more meanwhile.
	mixedWorkload(t, survivor.Endpoint, bucket, 2, 40, time.Second, 0, nil)
	waitFor(t, "the survivor to drain the queue", 60*time.Second, func() bool { return queueEmpty(t, tg.Name) })
	if took := time.Since(killedAt); took < 5*time.Second {
		t.Errorf("the queue drained %v after the kill, before the killed gateway's session (10 s) could have expired: was it delivering?", took)
	}
	dups := checkDelivered(t, committedEvents(t, bucket), rcv.events(), "")
	t.Logf("queue drained %v after the kill; %d events received, %d duplicates", time.Since(killedAt).Round(time.Millisecond), len(rcv.events()), dups)
}

// Lag with the default settings (500 ms poll) under a steady small-PUT
// workload, and a receiver that always answers: commit to receipt, per
// event. Measured, and bounded loosely so that a stalled delivery fails.
func TestNotifyLag(t *testing.T) {
	g := startGatewayProcess(t, testenv.Store(t))
	bucket := "t-notify-lag-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	rcv := startFlakyReceiver(t, "", func(int64) (int, time.Duration) { return 200, 0 })
	tg := addTarget(t, "webhook", "lag-"+randomSuffix(), "--url", "http://"+rcv.addr+"/")
	configureBucket(t, g.Endpoint, bucket, tg.ARN)
	start := time.Now()
	n := mixedWorkload(t, g.Endpoint, bucket, 4, 32, 3*time.Second, 0, nil)
	writing := time.Since(start)
	waitFor(t, "the queue to drain", 30*time.Second, func() bool { return queueEmpty(t, tg.Name) })
	got := rcv.events()
	checkDelivered(t, committedEvents(t, bucket), got, "")
	var lags []time.Duration
	for _, e := range got {
		lags = append(lags, e.At.Sub(e.CommittedAt))
	}
	slices.Sort(lags)
	if len(lags) < 20 {
		t.Fatalf("only %d events", len(lags))
	}
	p50, p99 := lags[len(lags)/2], lags[len(lags)*99/100]
	t.Logf("%d writes in %v (%.0f/s), %d events; lag commit to receipt p50 %v, p99 %v, max %v",
		n, writing.Round(time.Millisecond), float64(n)/writing.Seconds(), len(got), p50.Round(time.Millisecond), p99.Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
	if p99 > 5*time.Second {
		t.Errorf("p99 lag %v", p99)
	}
}
