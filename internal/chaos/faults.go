package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/chaos/history"
	"github.com/fencegate/fencegate/internal/faultproxy"
)

// The fault kinds, each injected from outside the gateways (processes,
// proxies, the store itself), except the failpoints, which are the product's
// one test hook (internal/failpoint).
const (
	FaultGatewayKill      = "gateway-kill"      // SIGKILL a gateway, start it again
	FaultGatewayFailpoint = "gateway-failpoint" // restart a gateway armed to die at a step of its next write
	FaultPostgresRestart  = "postgres-restart"  // PostgreSQL: fast shutdown or crash, then start
	FaultStoreRestart     = "store-restart"     // SeaweedFS: SIGTERM or crash, then start
	FaultStoreStall       = "store-stall"       // every store request delayed for a while
	FaultStoreLate        = "store-late"        // a write held at the proxy while its gateway dies or loses its database, delivered late
	FaultStoreReset       = "store-reset"       // every store connection reset
	FaultStoreDrop        = "store-drop"        // writes performed by the store, their answers lost
	FaultStoreFail        = "store-fail"        // store answers replaced by 500 / 503 (nothing performed)
	FaultStoreStallBody   = "store-stall-body"  // the store stops mid-way through large request bodies and answers
	FaultLeaseBlackhole   = "lease-blackhole"   // one gateway cut off from PostgreSQL: renewals and heartbeats lost
	FaultClientDisconnect = "client-disconnect" // PUTs whose client goes away mid-body
	FaultDirectWrite      = "direct-write"      // PUTs and DELETEs straight at the store, with its own key
	FaultBadInput         = "bad-input"         // the hostile-request corpus against a gateway
	FaultReceiverDown     = "receiver-down"     // the webhook target refuses connections or leaves requests unanswered for a while
	FaultNATSDown         = "nats-down"         // the NATS JetStream target's server killed (or stopped), started again
	// Only on the cluster stack (Config.Cluster, ClusterFaults): the
	// primary killed, the synchronous standby promoted, the dead primary
	// rebuilt as the new standby (a later one fails back);
	FaultPostgresFailover = "postgres-failover"
	// a SeaweedFS volume server SIGKILLed, started again;
	FaultVolumeKill = "volume-kill"
	// the SeaweedFS filer stopped or killed, started again;
	FaultFilerRestart = "filer-restart"
	// HAProxy stopped or killed (every connection through it cut), started again;
	FaultHAProxyRestart = "haproxy-restart"
	// a gateway holding leases taken out of HAProxy, put back.
	FaultGatewayDrain = "gateway-drain"
)

// AllFaults is every kind, the order the schedule's rounds shuffle.
var AllFaults = []string{
	FaultGatewayKill, FaultGatewayFailpoint, FaultPostgresRestart, FaultStoreRestart,
	FaultStoreStall, FaultStoreLate, FaultStoreReset, FaultStoreDrop, FaultStoreFail,
	FaultStoreStallBody, FaultLeaseBlackhole, FaultClientDisconnect, FaultDirectWrite, FaultBadInput,
	FaultReceiverDown, FaultNATSDown,
}

// ClusterFaults are the kinds only the cluster stack has parts for; a
// cluster campaign adds them to AllFaults.
var ClusterFaults = []string{FaultPostgresFailover, FaultVolumeKill, FaultFilerRestart, FaultHAProxyRestart, FaultGatewayDrain}

// Fault is one scheduled fault: drawn in advance from the seed (kind, time,
// target, parameters), then carried out and timed.
type Fault struct {
	Kind   string        `json:"kind"`
	At     time.Duration `json:"at"`     // planned start, since the campaign's start
	Target int           `json:"target"` // the gateway (for volume-kill, the volume server)
	Pause  time.Duration `json:"pause"`  // how long the fault lasts (or the process stays down)
	N      int           `json:"n"`      // how many requests it affects, where that applies
	Crash  bool          `json:"crash"`  // a crash rather than a clean stop
	Point  string        `json:"point,omitempty"`

	Start  int64  `json:"start_ns"` // when it really started and ended, since the campaign's start
	End    int64  `json:"end_ns"`
	Detail string `json:"detail,omitempty"`
	Err    string `json:"error,omitempty"`
}

// schedule draws the faults for duration from the seed: rounds in which
// every kind (of kinds) comes once, in a shuffled order, one fault every
// `every` on average.
func schedule(seed uint64, duration, every time.Duration, kinds []string, gateways int) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	var out []Fault
	at := every / 2
	for at < duration {
		round := append([]string(nil), kinds...)
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		for _, k := range round {
			if at >= duration {
				break
			}
			f := Fault{Kind: k, At: at, Target: rng.IntN(gateways), Crash: rng.IntN(2) == 0}
			switch k {
			case FaultGatewayKill:
				f.Pause = ms(rng, 200, 2000)
			case FaultGatewayFailpoint:
				f.Point = []string{"after-lease", "after-store-ack"}[rng.IntN(2)]
			case FaultPostgresRestart, FaultStoreRestart:
				f.Pause = ms(rng, 300, 3000)
			case FaultPostgresFailover:
				f.Pause = ms(rng, 0, 3000) // the failover manager's decision
			case FaultStoreStall:
				f.Pause, f.N = ms(rng, 300, 2500), 5+rng.IntN(30)
			case FaultStoreLate:
				f.Pause, f.N = ms(rng, 11000, 16000), 1+rng.IntN(2)
			case FaultStoreReset:
				f.N = 1 + rng.IntN(3)
			case FaultStoreDrop, FaultStoreFail:
				f.N = 1 + rng.IntN(4)
			case FaultStoreStallBody:
				f.Pause, f.N = ms(rng, 4000, 12000), 1+rng.IntN(2)
			case FaultLeaseBlackhole:
				f.Pause = ms(rng, 3000, 15000)
			case FaultClientDisconnect, FaultDirectWrite:
				f.N = 1 + rng.IntN(4)
			case FaultReceiverDown:
				f.Pause = ms(rng, 1000, 8000)
			case FaultNATSDown:
				f.Pause = ms(rng, 300, 4000)
			case FaultVolumeKill:
				f.Pause = ms(rng, 300, 5000)
			case FaultFilerRestart:
				f.Pause = ms(rng, 300, 3000)
			case FaultHAProxyRestart:
				f.Pause = ms(rng, 200, 2000)
			case FaultGatewayDrain:
				f.Pause = ms(rng, 2000, 8000)
			}
			out = append(out, f)
			at += time.Duration(float64(every) * (0.5 + rng.Float64()))
		}
	}
	return out
}

func ms(rng *rand.Rand, lo, hi int) time.Duration {
	return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond
}

// writes matches the store requests that may publish: PUT, POST, DELETE.
func writes(r *http.Request) bool {
	return r.Method == http.MethodPut || r.Method == http.MethodPost || r.Method == http.MethodDelete
}

// keyWrites matches the store requests that publish or remove a key's bytes
// (PutObject, CopyObject, DeleteObject, CompleteMultipartUpload), not those
// of an upload in progress (CreateMultipartUpload, UploadPart).
func keyWrites(r *http.Request) bool {
	q := r.URL.Query()
	switch r.Method {
	case http.MethodPut:
		return !q.Has("partNumber")
	case http.MethodDelete:
		return !q.Has("uploadId")
	case http.MethodPost:
		return q.Has("uploadId")
	}
	return false
}

// putObjects matches PutObject: a PUT of a key's bytes, not a part or a copy.
func putObjects(r *http.Request) bool {
	return r.Method == http.MethodPut && !r.URL.Query().Has("partNumber") && r.Header.Get("X-Amz-Copy-Source") == ""
}

func allRequests(*http.Request) bool { return true }

// inject carries out one fault; the next starts when it has ended.
func (c *Campaign) inject(ctx context.Context, f *Fault) {
	s := c.stack
	g := s.gateways[f.Target]
	rng := rand.New(rand.NewPCG(uint64(f.At), uint64(f.Target)))
	f.Start = c.rec.now()
	defer func() { f.End = c.rec.now() }()
	fail := func(err error) {
		if err != nil {
			f.Err = err.Error()
		}
	}
	switch f.Kind {
	case FaultGatewayKill:
		s.killGateway(g)
		sleep(ctx, f.Pause)
		fail(s.startGateway(context.Background(), g, ""))
	case FaultGatewayFailpoint:
		s.killGateway(g)
		if err := s.startGateway(context.Background(), g, f.Point); err != nil {
			fail(err)
			return
		}
		g.mu.Lock()
		p := g.proc
		g.mu.Unlock()
		died, _ := p.Exited(20 * time.Second)
		f.Detail = fmt.Sprintf("died at %s: %v", f.Point, died)
		s.killGateway(g)
		fail(s.startGateway(context.Background(), g, ""))
	case FaultPostgresRestart:
		fail(s.restartPostgres(ctx, f.Crash, f.Pause))
		f.Detail = fmt.Sprintf("crash %v", f.Crash)
	case FaultPostgresFailover:
		detail, err := s.failover(ctx, f.Pause)
		f.Detail = detail
		fail(err)
	case FaultStoreRestart:
		fail(s.restartSeaweed(ctx, f.Crash, f.Pause))
		f.Detail = fmt.Sprintf("crash %v", f.Crash)
	case FaultStoreStall:
		g.storeHTTP.Delay(allRequests, f.N, f.Pause)
		sleep(ctx, f.Pause+time.Second)
		g.storeHTTP.Reset()
	case FaultStoreLate:
		// Gateway g's writes are held at the store's door; g dies (or
		// loses its database) while they wait, the key's lease passes to
		// another gateway, and then they are delivered: a stale writer,
		// which the fence must stop.
		match := keyWrites
		if c.cfg.LatePutsOnly {
			// Small ones: a large body held at the door fills the
			// sockets' buffers, its gateway gives up on it after its
			// store answer timeout, and the store gets it cut short,
			// so it cannot land late.
			match = func(r *http.Request) bool { return putObjects(r) && !largeBodies(r) }
		}
		if c.cfg.LateReservationPuts {
			match = reservationPuts
		}
		h := g.storeHTTP.Hold(match, f.N)
		var held []faultproxy.Event
		timeout := time.After(10 * time.Second)
	wait:
		for len(held) < f.N {
			select {
			case ev := <-h.Arrived:
				held = append(held, ev)
			case <-timeout:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		// No more holds; one that matched meanwhile is held like the rest.
		g.storeHTTP.Reset()
		time.Sleep(100 * time.Millisecond) // a request that matched just before
	late:
		for {
			select {
			case ev := <-h.Arrived:
				held = append(held, ev)
			default:
				break late
			}
		}
		if f.Crash {
			s.killGateway(g)
		} else {
			g.blackholeDB(true)
		}
		// Once g's leases have passed on (its session timed out), this fault
		// writes each held key itself through another gateway, delivers the
		// held writes, and reads the keys: what it reads must be its own
		// write, never the late one (the fence refuses a write whose lease
		// has passed on).
		sleep(ctx, f.Pause)
		w := &worker{id: 4000 + f.Target, c: c, rng: rng, lastRead: map[string]string{}}
		for _, ev := range held {
			if bucket, key, ok := campaignKey(ev.Path); ok {
				c.writeUntilAcknowledged(w, f.Target, bucket, key, 20*time.Second)
			}
		}
		for range held {
			h.ReleaseDetached()
		}
		for range held {
			select {
			case <-h.Delivered:
			case <-time.After(10 * time.Second):
			}
		}
		for _, ev := range held {
			if bucket, key, ok := campaignKey(ev.Path); ok {
				if gi, url := c.pickGatewayExcept(rng, f.Target); url != "" {
					w.get(c.clients.get(url), gi, bucket, key)
				}
			}
		}
		if f.Crash {
			fail(s.startGateway(context.Background(), g, ""))
		} else {
			g.blackholeDB(false)
		}
		f.Detail = fmt.Sprintf("%d held; their gateway %s", len(held), map[bool]string{true: "killed", false: "cut off from PostgreSQL"}[f.Crash])
	case FaultStoreReset:
		for i := range f.N {
			if i > 0 {
				sleep(ctx, ms(rng, 100, 800))
			}
			s.storeTCP.CutAll()
		}
	case FaultStoreDrop:
		ev := g.storeHTTP.DropResponse(writes, f.N)
		waitEvents(ctx, ev, f.N, 10*time.Second)
		g.storeHTTP.Reset()
	case FaultStoreFail:
		status, code := 500, "InternalError"
		if f.Crash {
			status, code = 503, "ServiceUnavailable"
		}
		g.storeHTTP.Fail(allRequests, f.N, status, fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by the chaos campaign</Message></Error>`, code))
		sleep(ctx, 3*time.Second)
		g.storeHTTP.Reset()
	case FaultStoreStallBody:
		f.Detail = c.stallBodies(ctx, g, f)
	case FaultLeaseBlackhole:
		g.blackholeDB(true)
		sleep(ctx, f.Pause)
		g.blackholeDB(false)
	case FaultClientDisconnect:
		for range f.N {
			c.cutPut(rng)
		}
	case FaultDirectWrite:
		for range f.N {
			c.directWrite(rng)
		}
	case FaultBadInput:
		f.Detail = c.badInput(ctx, f.Target)
	case FaultReceiverDown, FaultNATSDown:
		fail(c.notify.inject(ctx, f))
	case FaultVolumeKill:
		i := f.Target % clusterVolumes
		fail(s.killVolume(ctx, i, f.Pause))
		f.Detail = fmt.Sprintf("volume server %d SIGKILLed", i+1)
	case FaultFilerRestart:
		fail(s.restartFiler(ctx, f.Crash, f.Pause))
		f.Detail = "SIGTERM"
		if f.Crash {
			f.Detail = "SIGKILL"
		}
	case FaultHAProxyRestart:
		fail(s.restartBalancer(ctx, f.Crash, f.Pause))
		f.Detail = "SIGTERM"
		if f.Crash {
			f.Detail = "SIGKILL"
		}
	case FaultGatewayDrain:
		detail, err := s.drain(ctx, g, f.Pause)
		f.Detail = detail
		fail(err)
	default:
		f.Err = "unknown fault kind"
	}
}

func waitEvents(ctx context.Context, ev <-chan faultproxy.Event, n int, limit time.Duration) {
	timeout := time.After(limit)
	for range n {
		select {
		case <-ev:
		case <-timeout:
			return
		case <-ctx.Done():
			return
		}
	}
}

// campaignKey parses a store path "/bucket/key" of the campaign's key space.
func campaignKey(path string) (bucket, key string, ok bool) {
	bucket, key, ok = strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return bucket, key, ok && slices.Contains(campaignBuckets, bucket) && slices.Contains(campaignKeys, key)
}

// writeUntilAcknowledged PUTs the key through gateways other than except
// until one write is acknowledged or the limit passes.
func (c *Campaign) writeUntilAcknowledged(w *worker, except int, bucket, key string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		gi, url := c.pickGatewayExcept(w.rng, except)
		if url == "" {
			return
		}
		w.put(c.clients.get(url), gi, bucket, key, history.NoCond)
		if ops := c.rec.snapshot(); ops[len(ops)-1].Outcome == history.OK {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}
