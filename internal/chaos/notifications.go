package chaos

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// The campaign's notification targets (docs/NOTIFICATIONS.md): a webhook
// served by the campaign itself, answering 500 to about a third of the
// requests and stalling past the sender's timeout on some, and a NATS
// JetStream subject of a nats-server the campaign runs. The webhook takes
// chaos-a's events and chaos-b's writes, NATS chaos-c's events and chaos-b's
// deletes (S3 refuses two configurations of one bucket sharing an event
// type), so an event of a bucket or type a target was not configured for is
// caught too.
type targetEvents struct {
	bucket           string
	created, removed bool
}

var (
	webhookEvents = []targetEvents{{"chaos-a", true, true}, {"chaos-b", true, false}}
	natsEvents    = []targetEvents{{"chaos-b", false, true}, {"chaos-c", true, true}}
)

// s3Events is a configuration's event types.
func (t targetEvents) s3Events() []types.Event {
	var out []types.Event
	if t.created {
		out = append(out, "s3:ObjectCreated:*")
	}
	if t.removed {
		out = append(out, "s3:ObjectRemoved:*")
	}
	return out
}

// wants reports whether a target configured with ts gets event e.
func wants(ts []targetEvents, e committedEvent) bool {
	for _, t := range ts {
		if t.bucket == e.Bucket && (e.Deleted && t.removed || !e.Deleted && t.created) {
			return true
		}
	}
	return false
}

const (
	webhookTarget = "chaos-hook"
	natsTarget    = "chaos-nats"
	natsSubject   = "chaos.events"
	natsStream    = "CHAOS"
	// notifyTimeout is the gateways' send timeout (campaignEnv); the
	// receiver's stalls outlast it.
	notifyTimeout = 500 * time.Millisecond
)

// notifyEnv is how the campaign's gateways deliver: short timeouts and
// back-offs, so that a target back from a fault is caught up within the
// campaign, and no dead letters (an event given up on is a lost event).
var notifyEnv = []string{
	"FENCEGATE_NOTIFY_TIMEOUT=" + notifyTimeout.String(), "FENCEGATE_NOTIFY_RETRY=100ms", "FENCEGATE_NOTIFY_RETRY_MAX=1s",
	"FENCEGATE_NOTIFY_POLL=200ms", "FENCEGATE_NOTIFY_MAX_TRIES=1000000", "FENCEGATE_NOTIFY_CLAIM=3s",
}

// notifications is the campaign's two targets.
type notifications struct {
	hook *receiver
	nats *natsProc
}

// setUpNotifications starts the receiver and nats-server, adds both targets
// with `fencegate targets add`, and configures the buckets (through a
// gateway, with S3's PutBucketNotificationConfiguration) before any write.
func (c *Campaign) setUpNotifications(ctx context.Context) error {
	s := c.stack
	n := &notifications{}
	var err error
	if n.hook, err = startReceiver(randomKey(32), rand.New(rand.NewPCG(c.cfg.Seed, 0x4007))); err != nil {
		return err
	}
	c.notify = n
	if n.nats, err = startNATS(filepath.Join(s.dir, "nats")); err != nil {
		return err
	}
	if err := n.nats.createStream(ctx); err != nil {
		return err
	}
	arns := map[string]string{}
	for _, args := range [][]string{
		{"webhook", webhookTarget, "--url", "http://" + n.hook.addr + "/events", "--secret", n.hook.secret},
		{"nats", natsTarget, "--url", n.nats.url(), "--subject", natsSubject},
	} {
		out, err := s.tool(ctx, append(append([]string{"targets", "add"}, args...), "--json")...)
		if err != nil {
			return fmt.Errorf("fencegate targets add %s: %v: %s", args[0], err, out)
		}
		var t struct{ Name, ARN string }
		if err := json.Unmarshal([]byte(out), &t); err != nil || t.ARN == "" {
			return fmt.Errorf("fencegate targets add %s printed %q: %v", args[0], out, err)
		}
		arns[t.Name] = t.ARN
	}
	cl := c.clients.get(s.gateways[0].URL())
	for _, b := range campaignBuckets {
		var cfg types.NotificationConfiguration
		for _, t := range webhookEvents {
			if t.bucket == b {
				cfg.QueueConfigurations = []types.QueueConfiguration{{Id: aws.String("hook"), QueueArn: aws.String(arns[webhookTarget]), Events: t.s3Events()}}
			}
		}
		for _, t := range natsEvents {
			if t.bucket == b {
				cfg.TopicConfigurations = []types.TopicConfiguration{{Id: aws.String("nats"), TopicArn: aws.String(arns[natsTarget]), Events: t.s3Events()}}
			}
		}
		if _, err := cl.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{Bucket: aws.String(b), NotificationConfiguration: &cfg}); err != nil {
			return fmt.Errorf("configure %s's notifications: %w", b, err)
		}
	}
	return nil
}

func (n *notifications) stop() {
	if n == nil {
		return
	}
	if n.hook != nil {
		n.hook.stop()
	}
	if n.nats != nil {
		n.nats.kill(syscall.SIGKILL)
	}
}

// inject carries out a receiver-down or nats-down fault.
func (n *notifications) inject(ctx context.Context, f *Fault) error {
	switch f.Kind {
	case FaultReceiverDown:
		if f.Crash {
			f.Detail = "connections refused"
			n.hook.stop()
		} else {
			f.Detail = "requests unanswered"
			n.hook.setHang(true)
		}
		sleep(ctx, f.Pause)
		n.hook.setHang(false)
		return n.hook.start()
	case FaultNATSDown:
		sig := map[bool]syscall.Signal{true: syscall.SIGKILL, false: syscall.SIGTERM}[f.Crash]
		f.Detail = sig.String()
		n.nats.kill(sig)
		sleep(ctx, f.Pause)
		return n.nats.start()
	}
	return nil
}

// signatureHeader carries a webhook body's HMAC-SHA256 under the target's
// secret, "sha256=" and its hex (docs/NOTIFICATIONS.md). The campaign checks
// it with its own code, not the gateway's.
const signatureHeader = "X-Fencegate-Signature"

func sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// receiver is the webhook endpoint: on a fixed address, stopped (connections
// refused) and started again by receiver-down faults; it answers each POST as
// its random sequence says and records what it got.
type receiver struct {
	addr   string
	secret string

	mu     sync.Mutex
	rng    *rand.Rand
	srv    *http.Server
	hang   bool
	got    []receivedEvent
	badSig int
	bad    []string // bodies it could not read as one event
}

func startReceiver(secret string, rng *rand.Rand) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{addr: ln.Addr().String(), secret: secret, rng: rng}
	r.serve(ln)
	return r, nil
}

func (r *receiver) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(r.handle), ReadHeaderTimeout: 10 * time.Second}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// handle: about a third of the requests answered 500, one in twenty
// stalled past the sender's timeout, the rest 204; every request hangs while
// the receiver is "down" without refusing connections.
func (r *receiver) handle(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	ev, perr := parseEvent(body)
	r.mu.Lock()
	if err != nil || perr != nil {
		r.bad = append(r.bad, fmt.Sprintf("%q: %v %v", body, err, perr))
		r.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if !hmac.Equal([]byte(req.Header.Get(signatureHeader)), []byte(sign(r.secret, body))) {
		r.badSig++
	}
	hang, draw := r.hang, r.rng.IntN(60)
	i := len(r.got)
	r.got = append(r.got, ev)
	r.mu.Unlock()
	var stall time.Duration
	switch {
	case hang:
		stall = time.Hour
	case draw < 3:
		stall = 2 * notifyTimeout
	case draw < 23:
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if stall > 0 {
		select {
		case <-time.After(stall):
		case <-req.Context().Done():
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable) // too late: the sender has given up
		return
	}
	r.mu.Lock()
	r.got[i].Acked = true
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) setHang(on bool) {
	r.mu.Lock()
	r.hang = on
	r.mu.Unlock()
}

func (r *receiver) stop() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// start listens again on the receiver's address (a no-op while it serves).
func (r *receiver) start() error {
	r.mu.Lock()
	up := r.srv != nil
	r.mu.Unlock()
	if up {
		return nil
	}
	var err error
	for range 100 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			r.serve(ln)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("webhook receiver: listen again on %s: %w", r.addr, err)
}

func (r *receiver) events() ([]receivedEvent, int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedEvent(nil), r.got...), r.badSig, append([]string(nil), r.bad...)
}

// parseEvent reads one event in S3's {"Records":[...]} format.
func parseEvent(body []byte) (receivedEvent, error) {
	var doc struct {
		Records []struct {
			EventName string `json:"eventName"`
			S3        struct {
				Bucket struct {
					Name string `json:"name"`
				} `json:"bucket"`
				Object struct {
					Key string `json:"key"`
				} `json:"object"`
			} `json:"s3"`
			Fencegate struct {
				EventID    string `json:"eventId"`
				Generation int64  `json:"generation"`
			} `json:"fencegate"`
		}
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return receivedEvent{}, err
	}
	if len(doc.Records) != 1 {
		return receivedEvent{}, fmt.Errorf("%d records", len(doc.Records))
	}
	rec := doc.Records[0]
	key, err := url.QueryUnescape(rec.S3.Object.Key)
	if err != nil {
		return receivedEvent{}, err
	}
	return receivedEvent{ID: rec.Fencegate.EventID, Bucket: rec.S3.Bucket.Name, Key: key, Gen: rec.Fencegate.Generation, Name: rec.EventName}, nil
}
