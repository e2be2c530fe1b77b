package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/meta"
)

// The notification cell (issue 32, docs/NOTIFICATIONS.md): the small-PUT
// cell's load (PUT 64 KiB, 32 clients, one key each) into a bucket whose
// events go to a signed webhook served by this process, against fencegate
// only. Beside its PUT throughput, which the same round's PUT 64 KiB c=32
// (a bucket without a configuration) is the baseline of, it records how fast
// the events arrived and how long after their commit.
const (
	opPUTNotify  = "PUTNOTIFY"
	notifyBucket = "fencebench-notify"
	// notifyDrain bounds the wait after a cell for its events to arrive.
	notifyDrain = 60 * time.Second
)

var notifyCell = cell{opPUTNotify, 64 << 10, 32}

// NotifyFigures is what a notification cell's record adds: medians over the
// rounds, and round by round.
type NotifyFigures struct {
	// Events the webhook acknowledged, per second from the cell's start to
	// the last one's arrival (the PUT rate when delivery keeps up).
	EventsPerS       float64   `json:"events_per_s"`
	EventsPerSRounds []float64 `json:"events_per_s_rounds"`
	// Lag: an event's arrival at the webhook minus its commit (eventTime,
	// PostgreSQL's clock on this machine, to the millisecond).
	LagP50Ms       float64   `json:"lag_p50_ms"`
	LagP99Ms       float64   `json:"lag_p99_ms"`
	LagP99MsRounds []float64 `json:"lag_p99_ms_rounds"`
	// Events of acknowledged PUTs not arrived within the drain limit (60 s),
	// all rounds together.
	Undelivered int `json:"undelivered"`
}

// notifySample is one run of the notification cell's delivery.
type notifySample struct {
	events, undelivered int
	perS                float64
	lagP50, lagP99      time.Duration
}

// benchHook is the webhook: it answers every signed event 204 and notes its
// commit time and arrival.
type benchHook struct {
	srv    *http.Server
	url    string
	secret string
	mu     sync.Mutex
	got    []hookArrival
	bad    int
}

type hookArrival struct{ committed, at time.Time }

// hook is the benchmark's webhook, once setUpNotify has started it (runCell
// has no other way to it).
var hook *benchHook

func (h *benchHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	at := time.Now()
	var doc struct {
		Records []struct {
			EventTime string `json:"eventTime"`
		}
	}
	if err == nil {
		err = json.Unmarshal(body, &doc)
	}
	var committed time.Time
	if err == nil && len(doc.Records) == 1 {
		committed, err = time.Parse(time.RFC3339Nano, doc.Records[0].EventTime)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil || len(doc.Records) != 1 || !h.signed(r.Header.Get("X-Fencegate-Signature"), body) {
		h.bad++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.got = append(h.got, hookArrival{committed, at})
	w.WriteHeader(http.StatusNoContent)
}

// signed checks the X-Fencegate-Signature header, "sha256=" and the hex of
// the body's HMAC-SHA256 under the target's secret (docs/NOTIFICATIONS.md),
// as a consumer would.
func (h *benchHook) signed(header string, body []byte) bool {
	m := hmac.New(sha256.New, []byte(h.secret))
	m.Write(body)
	return hmac.Equal([]byte(header), []byte("sha256="+hex.EncodeToString(m.Sum(nil))))
}

func (h *benchHook) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

// setUpNotify starts the webhook, adds it as a target (`fencegate targets
// add webhook`) and points the notification bucket's events at it (S3's
// PutBucketNotificationConfiguration through fencegate).
func setUpNotify(ctx context.Context, s *benchStack) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h := &benchHook{url: "http://" + ln.Addr().String() + "/events", secret: meta.NewServerKey()[:32]}
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	hook = h
	out, err := stack.RunTool(ctx, s.fgBin, s.fgEnv, "targets", "add", "webhook", "fencebench-hook", "--url", h.url, "--secret", h.secret, "--json")
	if err != nil {
		return fmt.Errorf("fencegate targets add: %v: %s", err, out)
	}
	var t struct{ ARN string }
	if err := json.Unmarshal([]byte(out), &t); err != nil || t.ARN == "" {
		return fmt.Errorf("fencegate targets add printed %q: %v", out, err)
	}
	cl := newS3c(target{name: "fencegate", Endpoint: s.fgClient})
	buf := make([]byte, 4096)
	if _, _, _, err := cl.do(ctx, "PUT", "/"+notifyBucket, "", nil, 0, buf, false); err != nil {
		return err
	}
	doc := `<NotificationConfiguration><QueueConfiguration><Id>bench</Id><Queue>` + t.ARN +
		`</Queue><Event>s3:ObjectCreated:*</Event><Event>s3:ObjectRemoved:*</Event></QueueConfiguration></NotificationConfiguration>`
	_, _, _, err = cl.do(ctx, "PUT", "/"+notifyBucket, "notification", strings.NewReader(doc), int64(len(doc)), buf, false)
	return err
}

func stopNotify() {
	if hook != nil {
		_ = hook.srv.Close()
	}
}

// putNotify is the notification cell's PUT: worker w's own key in the
// configured bucket.
func (c *s3c) putNotify(ctx context.Context, w int, data, buf []byte) error {
	key := fmt.Sprintf("put/%s/%d/%d", c.name, len(data), w)
	_, _, _, err := c.do(ctx, "PUT", "/"+notifyBucket+"/"+key, "", bytes.NewReader(data), int64(len(data)), buf, false)
	return err
}

// drainNotify waits (at most notifyDrain) until the webhook has the events of
// the cell's acknowledged PUTs (those after index from), and measures them.
func drainNotify(ctx context.Context, from, puts int, start time.Time) notifySample {
	deadline := time.Now().Add(notifyDrain)
	for hook.count()-from < puts && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	hook.mu.Lock()
	got := append([]hookArrival(nil), hook.got[from:]...)
	hook.mu.Unlock()
	ns := notifySample{events: len(got), undelivered: max(0, puts-len(got))}
	if len(got) == 0 {
		return ns
	}
	lags := make([]time.Duration, len(got))
	last := got[0].at
	for i, a := range got {
		lags[i] = a.at.Sub(a.committed)
		if a.at.After(last) {
			last = a.at
		}
	}
	slices.Sort(lags)
	ns.lagP50, ns.lagP99 = lags[(len(lags)-1)*50/100], lags[(len(lags)-1)*99/100]
	ns.perS = float64(len(got)) / last.Sub(start).Seconds()
	return ns
}

// aggregateNotify is the notification figures of a cell's samples (nil for
// any other cell).
func aggregateNotify(ss []sample) *NotifyFigures {
	var f NotifyFigures
	var perS, p50, p99 []float64
	for _, s := range ss {
		if s.notify == nil {
			return nil
		}
		f.Undelivered += s.notify.undelivered
		perS = append(perS, s.notify.perS)
		p50 = append(p50, ms(s.notify.lagP50.Seconds()))
		p99 = append(p99, ms(s.notify.lagP99.Seconds()))
		f.EventsPerSRounds = append(f.EventsPerSRounds, round3(s.notify.perS))
		f.LagP99MsRounds = append(f.LagP99MsRounds, round3(ms(s.notify.lagP99.Seconds())))
	}
	if len(ss) == 0 {
		return nil
	}
	f.EventsPerS, f.LagP50Ms, f.LagP99Ms = round3(summarize(perS).med), round3(summarize(p50).med), round3(summarize(p99).med)
	return &f
}

// notifyCheck is issue 32's target: delivery costs the small PUT at most 5%
// of its throughput (the notification cell against the same round's PUT
// 64 KiB c=32 without a configuration, round-paired).
func notifyCheck(recs []Record) check {
	ch := check{source: "issue 32", name: "PUT 64 KiB c=32 with a webhook target >= 0.95x without",
		worst: cellLabel(notifyCell) + " vs " + cellLabel(smallPUT)}
	a, b := findRec(recs, "fencegate", notifyCell), findRec(recs, "fencegate", smallPUT)
	if a == nil || b == nil || len(a.MiBPerSRounds) == 0 || len(a.MiBPerSRounds) != len(b.MiBPerSRounds) {
		return ch
	}
	var v []float64
	for i := range a.MiBPerSRounds {
		if b.MiBPerSRounds[i] > 0 {
			v = append(v, a.MiBPerSRounds[i]/b.MiBPerSRounds[i])
		}
	}
	if len(v) == 0 {
		return ch
	}
	s := summarize(v)
	ch.known, ch.held = true, s.med >= 0.95 && (a.Notify == nil || a.Notify.Undelivered == 0)
	ch.measured = s.String() + "x"
	if n := a.Notify; n != nil {
		ch.measured += fmt.Sprintf("; %s events/s delivered, lag p99 %s ms", stats{n.EventsPerS, slices.Min(n.EventsPerSRounds), slices.Max(n.EventsPerSRounds)}, num(n.LagP99Ms))
		if n.Undelivered > 0 {
			ch.measured += fmt.Sprintf(", %d events not delivered within %s", n.Undelivered, notifyDrain)
		}
	}
	return ch
}

// notifySummary is a line on the notification cell for the tables, "" when
// the results have none.
func notifySummary(recs []Record) string {
	r := findRec(recs, "fencegate", notifyCell)
	if r == nil || r.Notify == nil || len(r.Notify.EventsPerSRounds) == 0 {
		return ""
	}
	n := r.Notify
	return fmt.Sprintf("Event notifications (%s; the webhook, signed, served by fencebench itself): %s events/s delivered, lag from commit to arrival p50 %s ms, p99 %s ms [%s-%s]; %d events not delivered within %s.",
		cellLabel(notifyCell), stats{n.EventsPerS, slices.Min(n.EventsPerSRounds), slices.Max(n.EventsPerSRounds)},
		num(n.LagP50Ms), num(n.LagP99Ms), num(slices.Min(n.LagP99MsRounds)), num(slices.Max(n.LagP99MsRounds)), n.Undelivered, notifyDrain)
}
