package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/gateway/reservations"
)

// The reservation workload (docs/CHAOS.md, "Reservations"): workers that
// reserve a key, upload under the reservation through its presigned PUT,
// complete, cancel, or let it expire, under the campaign's faults. Its keys
// live in a bucket of their own, outside the linearizability check's key
// space: the faults that act on keys (store-late's rewrite, direct writes,
// cut PUTs) pick campaign keys only, while every fault on processes, the
// database and the store hits the reservation workload as well. What it
// claims is checked at the end (reservations_check.go).

const (
	reservationBucket  = "chaos-r"
	reservationAccount = "chaos"
	// reservationLimit is far above what a campaign commits: the quota
	// check is on the account's bookkeeping, not on refusals.
	reservationLimit = 1 << 40
)

// The reservation workers' plans and their weights.
var reservationPlans = []weighted{
	{"put", 25},          // reserve, PUT
	{"put-complete", 20}, // reserve, PUT, complete (also the way to learn an unknown PUT's fate)
	{"put-cancel", 10},   // reserve, PUT, cancel (409 ReservationNotLive if the PUT committed)
	{"cancel", 10},       // reserve, cancel
	{"expire", 10},       // reserve, let it expire
	{"late-put", 10},     // reserve for 1 s, PUT after its expiry: refused
	{"put-remove", 15},   // reserve, PUT, then delete or overwrite the object through a gateway
}

// reservationLog is what the reservation workers did and were told: the
// claims the end check holds fencegate to.
type reservationLog struct {
	mu     sync.Mutex
	byID   map[string]*reservationRecord
	counts map[string]int
	// violations seen as they happened (a PUT acknowledged after its
	// reservation's expiry).
	violations []string
}

// reservationRecord is one reservation as its worker knows it.
type reservationRecord struct {
	ID, Key string
	// Uploaded: the ETags of every body PUT under it (whatever the answer).
	Uploaded []string
	// Acked: the ETag of a PUT under it answered 200; Completed: a complete
	// answered 200 with the reservation committed (its ETag); Cancelled: a
	// cancel answered 200.
	Acked, Completed string
	Cancelled        bool
}

func newReservationLog() *reservationLog {
	return &reservationLog{byID: map[string]*reservationRecord{}, counts: map[string]int{}}
}

func (l *reservationLog) count(what string) {
	l.mu.Lock()
	l.counts[what]++
	l.mu.Unlock()
}

func (l *reservationLog) update(id string, f func(r *reservationRecord)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.byID[id]
	if r == nil {
		r = &reservationRecord{ID: id}
		l.byID[id] = r
	}
	f(r)
}

func (l *reservationLog) violation(v string) {
	l.mu.Lock()
	l.violations = append(l.violations, v)
	l.mu.Unlock()
}

// setUpReservations creates the workload's bucket and quota account.
func (c *Campaign) setUpReservations(ctx context.Context) error {
	c.resv = newReservationLog()
	if c.cfg.Reservations < 0 {
		return nil
	}
	cl := c.clients.get(c.stack.gateways[0].URL())
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(reservationBucket)}); err != nil {
		return fmt.Errorf("create bucket %s: %w", reservationBucket, err)
	}
	if out, err := c.stack.tool(ctx, "quota", "set", reservationAccount, "--bytes", fmt.Sprint(int64(reservationLimit))); err != nil {
		return fmt.Errorf("quota set: %v: %s", err, out)
	}
	return nil
}

// startReservations starts the reservation workers (Config.Reservations).
func (c *Campaign) startReservations(ctx context.Context, wg *sync.WaitGroup) {
	for i := range max(c.cfg.Reservations, 0) {
		w := &reservationWorker{id: 500 + i, c: c, rng: rand.New(rand.NewPCG(c.cfg.Seed, uint64(500+i))),
			http: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
}

type reservationWorker struct {
	id   int
	c    *Campaign
	rng  *rand.Rand
	seq  int
	http *http.Client
}

func (w *reservationWorker) run(ctx context.Context) {
	for ctx.Err() == nil {
		w.one(ctx, w.pick())
		sleep(ctx, time.Duration(w.rng.IntN(50))*time.Millisecond)
	}
}

func (w *reservationWorker) pick() string { return pickWeighted(w.rng, reservationPlans) }

// api is a reservation API client at a gateway that is up (nil if none is).
func (w *reservationWorker) api() (*reservations.Client, string) {
	_, url := w.c.pickGateway(w.rng)
	if url == "" {
		return nil, ""
	}
	k := w.c.stack.client
	return &reservations.Client{Endpoint: url, AccessKey: k.AccessKey, SecretKey: k.SecretKey, HTTP: w.http}, url
}

// one carries out one plan from its reservation to its last call; once
// work ends (the workload's time is up) it starts no further step.
func (w *reservationWorker) one(work context.Context, plan string) {
	log := w.c.resv
	w.seq++
	value := fmt.Sprintf("r%d-%d", w.id, w.seq)
	body := bodyOf(value)
	size := int64(len(body))
	q := reservations.CreateRequest{Bucket: reservationBucket, Account: reservationAccount,
		Expires: fmt.Sprintf("%dms", 3000+w.rng.IntN(12000))}
	if w.rng.IntN(2) == 0 {
		q.Key = "k/" + value
	} else {
		q.Prefix = fmt.Sprintf("p/w%d/", w.id) // fencegate chooses the rest
	}
	if w.rng.IntN(2) == 0 {
		q.Size = &size
		sum := sha256.Sum256(body)
		q.SHA256 = base64.StdEncoding.EncodeToString(sum[:])
	} else {
		m := size + int64(w.rng.IntN(1024))
		q.MaxSize = &m
	}
	switch plan {
	case "late-put":
		q.Expires = "1s"
	case "expire":
		q.Expires = fmt.Sprintf("%dms", 1000+w.rng.IntN(2000))
	}
	api, _ := w.api()
	if api == nil {
		sleep(context.Background(), 50*time.Millisecond)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := api.Create(ctx, q)
	if err != nil {
		log.count("create " + apiOutcome(err))
		return
	}
	log.count("create ok")
	log.update(res.ID, func(r *reservationRecord) { r.Key = res.Key })

	switch plan {
	case "expire":
		return
	case "cancel":
		w.cancel(ctx, res)
		return
	case "late-put":
		sleep(work, time.Until(res.ExpiresAt)+time.Duration(200+w.rng.IntN(800))*time.Millisecond)
	}
	if work.Err() != nil {
		return
	}
	outcome := w.put(ctx, res, body)
	if outcome == "unknown" && w.rng.IntN(2) == 0 {
		outcome = w.put(ctx, res, body) // the same upload again: one publication at most
	}
	switch plan {
	case "put-complete":
		w.complete(ctx, res)
	case "put-cancel":
		w.cancel(ctx, res)
	case "put-remove":
		if outcome == "ok" {
			w.remove(ctx, res)
		}
	default:
		if outcome == "unknown" {
			w.complete(ctx, res) // what an application does to learn an unknown upload's fate
		}
	}
}

// put sends body under res through a random gateway that is up, presigned
// for that gateway (a presigned URL names its host): "ok", "refused" (a
// definite refusal: a 4xx, 503 SlowDown, no connection made) or "unknown".
func (w *reservationWorker) put(ctx context.Context, res reservations.Reservation, body []byte) string {
	log := w.c.resv
	_, url := w.c.pickGateway(w.rng)
	if url == "" {
		return "refused"
	}
	res.State = reservations.Reserved
	k := w.c.stack.client
	if err := reservations.PresignPut(&res, url, "us-east-1", k.SecretKey, time.Now()); err != nil {
		log.violation("presign: " + err.Error())
		return "refused"
	}
	etag := md5Hex(body)
	log.update(res.ID, func(r *reservationRecord) { r.Uploaded = append(r.Uploaded, etag) })
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, res.PutURL, bytes.NewReader(body))
	if err != nil {
		log.violation("PUT request: " + err.Error())
		return "refused"
	}
	for h, v := range res.PutHeaders {
		req.Header.Set(h, v)
	}
	sent := time.Now()
	resp, err := w.http.Do(req)
	outcome := "unknown"
	status, code := 0, ""
	switch {
	case err != nil:
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Op == "dial" {
			outcome = "refused"
		}
	default:
		status = resp.StatusCode
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if m := xmlCode.FindSubmatch(b); m != nil {
			code = string(m[1])
		}
		switch {
		case status == http.StatusOK:
			outcome = "ok"
			got := strings.Trim(resp.Header.Get("ETag"), `"`)
			if got != etag {
				log.violation(fmt.Sprintf("PUT under reservation %s acknowledged with ETag %s, sent %s", res.ID, got, etag))
			}
			log.update(res.ID, func(r *reservationRecord) { r.Acked = got })
			// The gateway checks the expiry before reading a byte: a PUT
			// sent after it is refused (a second of slack for the clocks
			// and the request's own travel).
			if late := sent.Sub(res.ExpiresAt); late > time.Second {
				log.violation(fmt.Sprintf("a PUT under reservation %s sent %s after its expiry was acknowledged", res.ID, late.Round(time.Millisecond)))
			}
		case status >= 400 && status < 500, status == http.StatusServiceUnavailable && code == "SlowDown":
			outcome = "refused"
		}
	}
	if outcome != "ok" && status != 0 {
		log.count(fmt.Sprintf("put %s (%d %s)", outcome, status, code))
		return outcome
	}
	log.count("put " + outcome)
	return outcome
}

func (w *reservationWorker) complete(ctx context.Context, res reservations.Reservation) {
	log := w.c.resv
	api, _ := w.api()
	if api == nil {
		return
	}
	got, err := api.Complete(ctx, res.ID)
	if err != nil {
		log.count("complete " + apiOutcome(err))
		return
	}
	log.count("complete ok")
	if got.State != reservations.Committed {
		log.violation(fmt.Sprintf("complete of %s answered 200 with state %s", res.ID, got.State))
		return
	}
	log.update(res.ID, func(r *reservationRecord) { r.Completed = got.ETag })
}

func (w *reservationWorker) cancel(ctx context.Context, res reservations.Reservation) {
	log := w.c.resv
	api, _ := w.api()
	if api == nil {
		return
	}
	got, err := api.Cancel(ctx, res.ID)
	if err != nil {
		log.count("cancel " + apiOutcome(err))
		return
	}
	log.count("cancel ok")
	if got.State != reservations.Cancelled {
		log.violation(fmt.Sprintf("cancel of %s answered 200 with state %s", res.ID, got.State))
		return
	}
	log.update(res.ID, func(r *reservationRecord) { r.Cancelled = true })
}

// remove deletes or overwrites a committed reservation's object through a
// gateway (an ordinary write, the key no longer reserved): the account's
// used bytes must drop by the catalog's size of it.
func (w *reservationWorker) remove(ctx context.Context, res reservations.Reservation) {
	log := w.c.resv
	_, url := w.c.pickGateway(w.rng)
	if url == "" {
		return
	}
	cl := w.c.clients.get(url)
	var err error
	what := "delete"
	if w.rng.IntN(2) == 0 {
		_, err = cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(reservationBucket), Key: aws.String(res.Key)})
	} else {
		what = "overwrite"
		v := fmt.Sprintf("o%d-%d", w.id, w.seq)
		_, err = cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(reservationBucket), Key: aws.String(res.Key),
			Body: bytes.NewReader(bodyOf(v))})
	}
	if err != nil {
		status, code := errorStatus(err)
		log.count(fmt.Sprintf("%s %d %s", what, status, code))
		return
	}
	log.count(what + " ok")
}

// reservationPuts matches the store requests that publish bytes under a
// reservation: PutObjects of the workload's bucket.
func reservationPuts(r *http.Request) bool {
	return putObjects(r) && strings.HasPrefix(r.URL.Path, "/"+reservationBucket+"/")
}

var xmlCode = regexp.MustCompile(`<Code>([^<]+)</Code>`)

// apiOutcome names an API call's failure for the counts: its code, or
// "no answer".
func apiOutcome(err error) string {
	var ae *reservations.APIError
	if errors.As(err, &ae) {
		return fmt.Sprintf("%d %s", ae.Status, ae.Code)
	}
	return "no answer"
}
