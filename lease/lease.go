// Package lease runs fencegate's write protocol (DESIGN.md W1-W8): per-key
// leases on PostgreSQL's clock with renewal and a local monotonic deadline,
// settling a key's unresolved attempts before a write (resolve, then fence),
// the verified, locked commit, and the reconciler. It knows nothing of HTTP:
// storage reaches it through the Store interface, SQL through Driver.
package lease

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencegate/fencegate/meta"
)

// Config tunes leases. TTLs are configuration so tests run in seconds.
type Config struct {
	TTL        time.Duration // lease lifetime on PostgreSQL's clock (60 s)
	RenewEvery time.Duration // renewal period while the upstream request is outstanding (20 s)
	// Margin is kept between the local deadline (last successful renewal's send
	// time + TTL - Margin) and the lease's expiry on the database clock.
	Margin    time.Duration
	WaitMax   time.Duration // how long a writer without its own condition waits for a leased key (then 503)
	WaitPoll  time.Duration // how often a waiting writer retries
	DBTimeout time.Duration // bound on every database call
	Gateway   string        // this process's identity, recorded on its attempts
}

func (c *Config) setDefaults() {
	if c.TTL == 0 {
		c.TTL = 60 * time.Second
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.TTL / 3
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 6
	}
	if c.WaitMax == 0 {
		c.WaitMax = 10 * time.Second
	}
	if c.WaitPoll == 0 {
		c.WaitPoll = 50 * time.Millisecond
	}
	if c.DBTimeout == 0 {
		c.DBTimeout = 5 * time.Second
	}
	if c.Gateway == "" {
		c.Gateway = "fencegate"
	}
}

// Validate reports configurations under which the protocol cannot hold.
func (c Config) Validate() error {
	c.setDefaults()
	if c.RenewEvery >= c.TTL-c.Margin {
		return errors.New("lease renewal interval must be shorter than TTL - margin")
	}
	return nil
}

// Driver is the SQL the protocol needs (meta.Catalog implements it).
type Driver interface {
	// Acquire also returns the key's state, read under the new lease.
	Acquire(ctx context.Context, p meta.AcquireParams) (bool, *meta.KeyState, error)
	Renew(ctx context.Context, bucket, key, holder string, ttl time.Duration) (bool, error)
	Release(ctx context.Context, bucket, key, holder, state, reason string) error
	KeyState(ctx context.Context, bucket, key string) (meta.KeyState, error)
	Commit(ctx context.Context, p meta.CommitParams) (int64, error)
	AttemptByID(ctx context.Context, id string) (meta.Attempt, error)
	MarkDeadUnknown(ctx context.Context, bucket, key string) error
	ClaimUnresolved(ctx context.Context, limit int, claimFor time.Duration) ([][2]string, error)
	NoteTry(ctx context.Context, bucket, key, errText string) error
}

var (
	// ErrConflict: the key is leased and the writer sent a condition of its own
	// (S3's 409 ConditionalRequestConflict).
	ErrConflict = errors.New("the key is being written by another request")
	// ErrBusy: the bounded wait for a leased key ran out (503 SlowDown).
	ErrBusy = errors.New("timed out waiting for the key's lease")
)

// Hooks are test signals: each, if set, is called at its point and may block
// to hold the protocol there.
type Hooks struct {
	Acquired func(bucket, key, attempt string)
	Waiting  func(bucket, key string) // a writer found the key leased and waits

	BeforeCommit func(bucket, key, attempt string)
}

// Manager hands out leases.
type Manager struct {
	cfg     Config
	db      Driver
	Metrics *Metrics
	Hooks   Hooks
}

func NewManager(cfg Config, db Driver, m *Metrics) *Manager {
	cfg.setDefaults()
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Manager{cfg: cfg, db: db, Metrics: m}
}

func (m *Manager) Config() Config { return m.cfg }

// Request describes the write that wants a key.
type Request struct {
	Bucket, Key string
	Op          string // put, copy, complete, delete
	// AttemptID of an existing attempt (a multipart upload's, at Complete);
	// empty makes a new one.
	AttemptID    string
	DeclaredSize int64 // -1: not known
	Checksum     string
	// ClientConditional: the client sent If-Match / If-None-Match itself, so a
	// leased key is a conflict, not a wait.
	ClientConditional bool
	// NoWait: give up at once if the key is leased (the reconciler, DeleteObjects).
	NoWait bool
	// MayHaveLanded: the existing attempt's earlier try has an unknown outcome
	// (a repeated Complete), so settling must look at the store.
	MayHaveLanded bool
	settle        bool
}

func (m *Manager) dbctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.cfg.DBTimeout)
}

// Acquire takes the key's lease and records the attempt before any byte goes
// to the store (W1, W2). A writer with its own condition gets ErrConflict while
// the key is leased; any other waits up to WaitMax, without reading its body,
// then gets ErrBusy.
func (m *Manager) Acquire(ctx context.Context, req Request) (*Lease, error) {
	id := req.AttemptID
	existing := id != ""
	if !existing {
		id = meta.NewID()
	}
	p := meta.AcquireParams{
		Bucket: req.Bucket, Key: req.Key, Existing: existing, NoAttempt: req.settle, TTL: m.cfg.TTL,
		Attempt: meta.Attempt{ID: id, Op: req.Op, Gateway: m.cfg.Gateway, DeclaredSize: req.DeclaredSize, Checksum: req.Checksum},
	}
	waitUntil := time.Now().Add(m.cfg.WaitMax)
	waited := false
	for {
		sent := time.Now()
		dctx, cancel := m.dbctx(ctx)
		ok, ks, err := m.db.Acquire(dctx, p)
		cancel()
		if err != nil {
			return nil, err
		}
		if ok {
			m.Metrics.Acquired.Inc()
			if waited {
				m.Metrics.Waited.Inc()
			}
			l := m.newLease(req, id, sent)
			l.acquiredState = ks
			if m.Hooks.Acquired != nil {
				m.Hooks.Acquired(req.Bucket, req.Key, id)
			}
			return l, nil
		}
		if req.ClientConditional {
			m.Metrics.Refused.WithLabelValues("conflict").Inc()
			return nil, ErrConflict
		}
		if req.NoWait || time.Now().After(waitUntil) {
			m.Metrics.Refused.WithLabelValues("busy").Inc()
			return nil, ErrBusy
		}
		if !waited && m.Hooks.Waiting != nil {
			m.Hooks.Waiting(req.Bucket, req.Key)
		}
		waited = true
		poll := m.cfg.WaitPoll/2 + rand.N(m.cfg.WaitPoll)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// Lease is a held key lease. It renews itself until Commit or Finish; Lost is
// closed if it is lost (a renewal failed or the local deadline passed), and the
// holder must then cancel its upstream request.
type Lease struct {
	m           *Manager
	Bucket, Key string
	AttemptID   string
	Op          string
	req         Request
	// acquiredState is the key's state read with the lease, for the first
	// Settle; later ones read it again.
	acquiredState *meta.KeyState

	lost     chan struct{}
	lostOnce sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	renewer  sync.WaitGroup
	mu       sync.Mutex
	timer    *time.Timer
	finished bool
}

func (m *Manager) newLease(req Request, id string, sent time.Time) *Lease {
	l := &Lease{m: m, Bucket: req.Bucket, Key: req.Key, AttemptID: id, Op: req.Op, req: req,
		lost: make(chan struct{}), stop: make(chan struct{})}
	// The local deadline runs on the monotonic clock from the send time of the
	// call that (re)newed the lease, so it expires no later than the database's.
	l.timer = time.AfterFunc(time.Until(sent.Add(m.cfg.TTL-m.cfg.Margin)), l.markLost)
	l.renewer.Add(1)
	go l.renew()
	return l
}

func (l *Lease) markLost() {
	l.lostOnce.Do(func() {
		l.m.Metrics.Lost.Inc()
		close(l.lost)
	})
}

// Lost is closed when the lease is lost.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// IsLost reports whether the lease has been lost.
func (l *Lease) IsLost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

func (l *Lease) renew() {
	defer l.renewer.Done()
	t := time.NewTicker(l.m.cfg.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.lost:
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := l.m.dbctx(context.Background())
		ok, err := l.m.db.Renew(ctx, l.Bucket, l.Key, l.AttemptID, l.m.cfg.TTL)
		cancel()
		if err != nil || !ok {
			l.markLost()
			return
		}
		l.mu.Lock()
		l.timer.Reset(time.Until(sent.Add(l.m.cfg.TTL - l.m.cfg.Margin)))
		l.mu.Unlock()
	}
}

func (l *Lease) stopRenewing() {
	l.stopOnce.Do(func() {
		close(l.stop)
		l.mu.Lock()
		l.timer.Stop()
		l.mu.Unlock()
	})
	l.renewer.Wait()
}

// Commit records the acknowledged write as the key's next generation and
// releases the lease (W5). ErrLeaseLost means the lease expired first: the
// bytes may be at the store, so the attempt is left unknown for settling.
func (l *Lease) Commit(ctx context.Context, landed Landed) (int64, error) {
	if l.m.Hooks.BeforeCommit != nil {
		l.m.Hooks.BeforeCommit(l.Bucket, l.Key, l.AttemptID)
	}
	e := meta.Entry{ETag: landed.ETag, Size: landed.Size, Deleted: landed.Deleted,
		Origin: meta.OriginFencegate, AttemptID: l.AttemptID}
	dctx, cancel := l.m.dbctx(ctx)
	defer cancel()
	gen, err := l.m.db.Commit(dctx, meta.CommitParams{
		Bucket: l.Bucket, Key: l.Key, Holder: l.AttemptID,
		Settled: l.AttemptID, SettledState: meta.StateCommitted, Entry: e, Release: true,
	})
	l.stopRenewing()
	if err != nil {
		reason := "commit failed after the store acknowledged: " + err.Error()
		if errors.Is(err, meta.ErrLeaseLost) {
			reason = "lease lost before the commit; the store acknowledged the write"
		}
		l.m.Metrics.Unknown.Inc()
		l.finish(meta.StateUnknown, reason)
		return 0, err
	}
	l.mu.Lock()
	l.finished = true
	l.mu.Unlock()
	l.m.Metrics.Commits.Inc()
	return gen, nil
}

// Finish ends the attempt without a commit and releases the lease: failed
// (proven not written) or unknown (may have landed: kept as a guard).
func (l *Lease) Finish(state, reason string) {
	l.stopRenewing()
	if state == meta.StateUnknown {
		l.m.Metrics.Unknown.Inc()
	}
	l.finish(state, reason)
}

func (l *Lease) finish(state, reason string) {
	l.mu.Lock()
	if l.finished {
		l.mu.Unlock()
		return
	}
	l.finished = true
	l.mu.Unlock()
	// Best effort on a fresh context: the request's may be gone. If this fails
	// the lease simply expires and the attempt is settled by the next writer or
	// the reconciler.
	ctx, cancel := l.m.dbctx(context.Background())
	defer cancel()
	_ = l.m.db.Release(ctx, l.Bucket, l.Key, l.AttemptID, state, reason)
}

// Close releases a lease that was neither committed nor finished (a panic, a
// client gone): the outcome is unknown unless nothing was sent, which the
// caller says with sent=false.
func (l *Lease) Close(sent bool) {
	l.mu.Lock()
	done := l.finished
	l.mu.Unlock()
	if done {
		return
	}
	if sent {
		l.Finish(meta.StateUnknown, "the request ended without an answer from the store")
	} else {
		l.Finish(meta.StateFailed, "nothing was sent to the store")
	}
}
