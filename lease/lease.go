// Package lease runs fencegate's write protocol (docs/DESIGN.md, W1-W8): per-key
// leases on PostgreSQL's clock with renewal and a local monotonic deadline,
// settling a key's unresolved attempts before a write (resolve, then fence),
// the verified, locked commit, and the reconciler. It knows nothing of HTTP:
// storage reaches it through the Store interface, SQL through Driver.
package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Config tunes leases. TTLs are configuration so tests run in seconds.
type Config struct {
	TTL        time.Duration // lease lifetime on PostgreSQL's clock (60 s)
	RenewEvery time.Duration // renewal period while the upstream request is outstanding (20 s)
	// Margin is kept between the local deadline (last successful renewal's send
	// time + TTL - Margin) and the lease's expiry on the database clock.
	Margin  time.Duration
	WaitMax time.Duration // how long a writer without its own condition waits for a leased key (then 503)
	// WaitLimit is how long such a writer may wait in all while the holder
	// is making progress (its write's bytes flowing): past WaitMax it keeps
	// waiting only while the holder's progress is recent.
	WaitLimit time.Duration
	// ProgressEvery is how often a holder whose bytes flow records it.
	ProgressEvery time.Duration
	// WaitPoll is how often the head of a key's queue of waiting writers
	// asks for the key again while this gateway hears no releases from
	// others (no release listener, or it is down) (50 ms).
	WaitPoll time.Duration
	// WaitPollListening is that poll while the release listener is
	// subscribed (1 s): a release elsewhere wakes the head at once (see
	// handover.go), so the poll is only a fallback (a holder that died is
	// tried for when its liveness runs out: Held).
	WaitPollListening time.Duration
	DBTimeout         time.Duration // bound on every database call
	Gateway           string        // this process's identity, recorded on its attempts and its session

	// Gateway sessions (see session.go): the session is extended every
	// SessionHeartbeat (2 s) to SessionTimeout (10 s) ahead on PostgreSQL's
	// clock; the local session deadline is the last successful heartbeat's
	// send time + SessionTimeout - SessionMargin (2 s).
	SessionHeartbeat time.Duration
	SessionTimeout   time.Duration
	SessionMargin    time.Duration

	// GuardHorizon bounds how long a request fencegate sent can still reach
	// the store and land after fencegate gave up on it (20 min: the store's
	// 15-minute SigV4 clock-skew window plus a margin; docs/DESIGN.md, "When
	// a guard ends"). An unknown attempt older than this whose bytes a HEAD
	// does not find is closed: it can no longer land.
	GuardHorizon time.Duration
}

// YieldFor is how long a gateway's writers leave a key they just released
// to waiting writers of other gateways (meta/migrations/0010): a hot key
// reaches another gateway's waiter within one write and this, whether or not
// that gateway listens for releases.
const YieldFor = time.Second

// DefaultGuardHorizon is GuardHorizon's default.
const DefaultGuardHorizon = 20 * time.Minute

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
	if c.WaitLimit == 0 {
		c.WaitLimit = max(6*c.WaitMax, c.WaitMax)
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = min(2*time.Second, c.RenewEvery)
	}
	if c.WaitPoll == 0 {
		c.WaitPoll = DefaultWaitPoll
	}
	if c.WaitPollListening == 0 {
		c.WaitPollListening = DefaultWaitPollListening
	}
	if c.DBTimeout == 0 {
		c.DBTimeout = 5 * time.Second
	}
	if c.GuardHorizon == 0 {
		c.GuardHorizon = DefaultGuardHorizon
	}
	if c.Gateway == "" {
		c.Gateway = "fencegate"
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.SessionHeartbeat == 0 {
		c.SessionHeartbeat = c.SessionTimeout / 5
	}
	if c.SessionMargin == 0 {
		c.SessionMargin = c.SessionTimeout / 5
	}
}

// Validate reports configurations under which the protocol cannot hold.
// The waiting writers' polls: while no release listener is subscribed, and
// while one is (a release in another gateway then wakes them at once).
const (
	DefaultWaitPoll          = 50 * time.Millisecond
	DefaultWaitPollListening = time.Second
)

func (c Config) Validate() error {
	for _, d := range []time.Duration{c.TTL, c.RenewEvery, c.Margin, c.WaitMax, c.WaitLimit, c.ProgressEvery, c.WaitPoll, c.WaitPollListening, c.DBTimeout,
		c.SessionHeartbeat, c.SessionTimeout, c.SessionMargin, c.GuardHorizon} {
		if d < 0 {
			return errors.New("lease durations must not be negative")
		}
	}
	c.setDefaults()
	if c.RenewEvery >= c.TTL-c.Margin {
		return errors.New("lease renewal interval must be shorter than TTL - margin")
	}
	if c.SessionMargin >= c.SessionTimeout || c.SessionHeartbeat >= c.SessionTimeout-c.SessionMargin {
		return errors.New("the session heartbeat must be shorter than the session timeout - margin")
	}
	if c.WaitLimit < c.WaitMax {
		return errors.New("the maximum lease wait must be at least the lease wait")
	}
	return nil
}

// Driver is the SQL the protocol needs (Catalog implements it).
type Driver interface {
	// Acquire also returns the key's state, read under the new lease; a
	// *Held error while another holder is live.
	Acquire(ctx context.Context, p AcquireParams) (*Acquired, error)
	Renew(ctx context.Context, bucket, key, holder string, ttl time.Duration) (bool, error)
	// Progress records that holder's write is moving bytes.
	Progress(ctx context.Context, bucket, key, holder string) error
	// HolderProgressing: the key's live holder recorded progress within `within`.
	HolderProgressing(ctx context.Context, bucket, key string, within time.Duration) (bool, error)
	Release(ctx context.Context, bucket, key, holder string, end Ending) error
	KeyState(ctx context.Context, bucket, key string) (KeyState, error)
	Commit(ctx context.Context, p CommitParams) (int64, error)
	// CommitHandOver is Commit (with Release) that hands the lease, in the
	// same transaction, to next, a writer of this gateway waiting for the
	// key; nil Acquired: released instead (a writer of another gateway
	// waits, or the lease was lost).
	CommitHandOver(ctx context.Context, p CommitParams, next AcquireParams) (int64, *Acquired, error)
	AttemptByID(ctx context.Context, id string) (Attempt, error)
	// A multipart upload's attempt (multipart.go): recorded open, its
	// upload id, its Create's outcome (unless already bound), its abort.
	RecordAttempt(ctx context.Context, a Attempt) error
	SetUploadID(ctx context.Context, attemptID, uploadID string) error
	EndCreate(ctx context.Context, attemptID, state, reason string) error
	AttemptByUpload(ctx context.Context, uploadID string) (Attempt, error)
	SetState(ctx context.Context, attemptID, from, to, reason string) error
	MarkDeadUnknown(ctx context.Context, bucket, key string) error
	// CloseGuards fails unknown attempts past their horizon (settle.go).
	CloseGuards(ctx context.Context, bucket, key string, ids []string, reason string) error
	// ClaimUnresolved claims keys with unresolved attempts; an unknown
	// attempt's claim never runs far past its horizon (settle.go).
	ClaimUnresolved(ctx context.Context, limit int, claim Claim, horizon time.Duration) ([][2]string, error)
	// RetryKeyLater notes why a claimed key was not settled and makes it
	// claimable again after first, doubling per try, at most max.
	RetryKeyLater(ctx context.Context, bucket, key string, first, max time.Duration, errText string) error

	// Gateway sessions.
	OpenSession(ctx context.Context, gateway string, timeout time.Duration) (string, error)
	Heartbeat(ctx context.Context, id string, timeout time.Duration) (alive bool, live int, err error)
	EndSession(ctx context.Context, id string) error
}

var (
	// ErrConflict: the key is leased and the writer sent a condition of its own
	// (S3's 409 ConditionalRequestConflict).
	ErrConflict = errors.New("the key is being written by another request")
	// ErrBusy: the bounded wait for a leased key ran out (503 SlowDown).
	ErrBusy = errors.New("timed out waiting for the key's lease")
	// ErrReservationEnded: the write's reservation (Request.Reservation) is
	// no longer live; its attempt ended failed and nothing was sent.
	ErrReservationEnded = errors.New("the write's reservation is no longer live")
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
	sess    *session // nil: no session (leases live on their own expiry)
	queues  keyQueues
	// held counts the leases this manager holds now (HeldLeases).
	held atomic.Int64
}

func NewManager(cfg Config, db Driver, m *Metrics) *Manager {
	cfg.setDefaults()
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Manager{cfg: cfg, db: db, Metrics: m}
}

func (m *Manager) Config() Config { return m.cfg }

// HeldLeases is how many writes hold a lease of this manager now: each
// is at the store, or about to commit or finish. The catalog's group
// commit waits a moment for their commits when there are many (meta/batch.go).
func (m *Manager) HeldLeases() int { return int(m.held.Load()) }

// Request describes the write that wants a key.
type Request struct {
	Bucket, Key string
	Op          Kind
	// UploadAttempt is the multipart upload a Complete try publishes (its
	// attempt id). Every try is a new attempt of its own: a retry never
	// touches an earlier try's guard or lease.
	UploadAttempt string
	DeclaredSize  int64 // -1: not known
	// Checksum of the body when the client gave one up front ("crc32:<base64>").
	Checksum string
	// ClientConditional: the client sent If-Match / If-None-Match itself, so a
	// leased key is a conflict, not a wait.
	ClientConditional bool
	// NoWait: give up at once if the key is leased (the reconciler, DeleteObjects).
	NoWait bool
	// Reservation the write is made under (Attempt.Reservation): bound by
	// the acquire; ErrReservationEnded when it is no longer live.
	Reservation string
	settle      bool // a settler (the reconciler): no attempt, always HEADs
}

func (m *Manager) dbctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.cfg.DBTimeout)
}

// Acquire takes the key's lease and records the attempt before any byte goes
// to the store (W1, W2). A writer with its own condition gets ErrConflict while
// the key is leased; any other waits, without reading its body, up to WaitMax,
// and beyond it up to WaitLimit while the holder's bytes keep flowing, then
// gets ErrBusy. While the gateway's session is down it gets ErrNoSession.
func (m *Manager) Acquire(ctx context.Context, req Request) (l *Lease, err error) {
	if _, _, err := m.sess.current(); err != nil {
		m.Metrics.Refused.WithLabelValues("no_session").Inc()
		return nil, err
	}
	id := NewID()
	p := AcquireParams{
		Bucket: req.Bucket, Key: req.Key, NoAttempt: req.settle, TTL: m.cfg.TTL,
		Attempt: Attempt{ID: id, Op: req.Op, Gateway: m.cfg.Gateway, DeclaredSize: req.DeclaredSize,
			Checksum: req.Checksum, UploadAttempt: req.UploadAttempt, Reservation: req.Reservation},
	}
	start := time.Now()
	waitUntil, limit := start.Add(m.cfg.WaitMax), start.Add(m.cfg.WaitLimit)
	waited := false
	key := [2]string{req.Bucket, req.Key}
	var queued *waiter // this writer's place in the key's queue (handover.go)
	if !req.ClientConditional && !req.NoWait {
		// Take a place in the key's queue before asking the database, so a
		// release here or elsewhere that comes while the first attempt is in
		// flight wakes this writer.
		queued = m.queues.join(key)
		defer func() {
			if l == nil {
				m.abandonHandOver(req, queued)
			}
			m.queues.leave(key, queued, l != nil)
		}()
		if !m.queues.head(key, queued) {
			// Others here wait for the key: wait behind them.
			waited = true
			if m.Hooks.Waiting != nil {
				m.Hooks.Waiting(req.Bucket, req.Key)
			}
			_, epoch := m.queues.listenState()
			m.queues.park(queued, p)
			if err := m.awaitTurn(ctx, key, queued, epoch, time.Time{}, waitUntil, limit); err != nil {
				return nil, err
			}
		}
	}
	for {
		if queued != nil {
			// A holder's commit may have handed this writer the key.
			if h, ok := m.queues.handedOver(queued); ok && h.acq != nil {
				return m.granted(req, id, h.acq, h.sent, h.epoch, waited)
			}
		}
		sid, epoch, err := m.sess.current()
		if err != nil {
			m.Metrics.Refused.WithLabelValues("no_session").Inc()
			return nil, err
		}
		p.Session = sid
		// A writer that would wait marks the key, so the key's release
		// elsewhere is announced here (while the release listener is
		// subscribed) and, listener or not, a holder of another gateway
		// releases the key instead of handing it to its own waiters, and its
		// gateway yields it for YieldFor.
		_, listenEpoch := m.queues.listenState()
		p.Wait = queued != nil
		sent := time.Now()
		dctx, cancel := m.dbctx(ctx)
		acq, err := m.db.Acquire(dctx, p)
		cancel()
		var held *Held
		if errors.As(err, &held) {
			err = nil
		}
		if err != nil {
			// PostgreSQL may have applied the acquire and only its answer
			// been lost: give the lease back (it frees the key only if this
			// writer holds it), or the key stays orphaned for its TTL.
			m.release(req.Bucket, req.Key, id, Ending{State: StateFailed,
				Reason: "its acquire's answer was lost; nothing was sent"})
			return nil, err
		}
		if held == nil {
			return m.granted(req, id, acq, sent, epoch, waited)
		}
		if req.ClientConditional {
			m.Metrics.Refused.WithLabelValues("conflict").Inc()
			return nil, ErrConflict
		}
		if req.NoWait || time.Now().After(waitUntil) && !m.holderProgressing(ctx, req, limit) {
			m.Metrics.Refused.WithLabelValues("busy").Inc()
			return nil, ErrBusy
		}
		if !waited && m.Hooks.Waiting != nil {
			m.Hooks.Waiting(req.Bucket, req.Key)
		}
		waited = true
		// The holder is live until its lease's or its session's expiry at
		// most: if it died, the key is free then, poll or not.
		holderGone := time.Now().Add(held.LiveFor + time.Millisecond)
		m.queues.park(queued, p)
		if err := m.awaitTurn(ctx, key, queued, listenEpoch, holderGone, waitUntil, limit); err != nil {
			return nil, err
		}
	}
}

// granted makes the lease a writer was granted, by its own acquire or a
// holder's hand-over (sent: when the granting call was sent; epoch: the
// session's as of then).
func (m *Manager) granted(req Request, id string, acq *Acquired, sent time.Time, epoch uint64, waited bool) (*Lease, error) {
	m.Metrics.Acquired.Inc()
	if waited {
		m.Metrics.Waited.Inc()
	}
	if acq.TookOverDeadSession {
		m.Metrics.SessionTakeovers.Inc()
		m.Metrics.SessionTakeoverDelay.Observe(acq.DeadSessionFor.Seconds())
	}
	l := m.newLease(req, id, sent)
	if !m.sess.hold(l, epoch) {
		// The session went down while the lease was being taken: the
		// lease cannot outlive it, so nothing is sent under it.
		l.Finish(StateFailed, "the gateway's session was lost before anything was sent")
		m.Metrics.Refused.WithLabelValues("no_session").Inc()
		return nil, ErrNoSession
	}
	l.acquiredState = acq.State
	l.Waited = waited
	if acq.ReservationEnded {
		l.Finish(StateFailed, "its reservation is no longer live; nothing was sent")
		m.Metrics.Refused.WithLabelValues("reservation_ended").Inc()
		return nil, ErrReservationEnded
	}
	l.ReservationBound = acq.ReservationBound
	if m.Hooks.Acquired != nil {
		m.Hooks.Acquired(req.Bucket, req.Key, id)
	}
	return l, nil
}

// abandonHandOver is for a waiting writer that gives up (its context ended,
// its wait ran out): if a holder's commit is handing it the key, it waits
// for the hand-over and gives the lease back, its attempt failed (nothing
// was sent).
func (m *Manager) abandonHandOver(req Request, w *waiter) {
	h, ok := m.queues.handedOver(w)
	if !ok || h.acq == nil {
		return
	}
	m.release(req.Bucket, req.Key, h.id, Ending{State: StateFailed,
		Reason: "handed the key after its writer had gone; nothing was sent"})
}

// awaitTurn waits until w should try for the key again: woken (by a release
// here or elsewhere, the writer ahead leaving, the listener changing), or
// its poll comes round (see keyQueues.poll; epoch is the listener's as of
// w's last attempt). The head's wait never passes holderGone (when the
// holder, if it died, is no longer live; zero: not known), and no wait
// passes the writer's next deadline (waitUntil, then limit), so its last
// attempt is made there.
func (m *Manager) awaitTurn(ctx context.Context, key [2]string, w *waiter, epoch uint64, holderGone, waitUntil, limit time.Time) error {
	poll := m.queues.poll(key, w, epoch, m.cfg.WaitPoll, m.cfg.WaitPollListening)
	now := time.Now()
	if holderGone.After(now) && m.queues.head(key, w) {
		poll = min(poll, holderGone.Sub(now))
	}
	for _, d := range []time.Time{waitUntil, limit} {
		if d.After(now) {
			poll = min(poll, d.Sub(now))
			break
		}
	}
	t := time.NewTimer(poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case why := <-w.wake:
		m.Metrics.Wakeups.WithLabelValues(why).Inc()
	case <-t.C:
		m.Metrics.Wakeups.WithLabelValues(wokenPoll).Inc()
	}
	return nil
}

// holderProgressing reports, for a writer past its base wait, whether it may
// wait on: its limit is not reached and the holder's bytes are flowing.
func (m *Manager) holderProgressing(ctx context.Context, req Request, limit time.Time) bool {
	if time.Now().After(limit) {
		return false
	}
	dctx, cancel := m.dbctx(ctx)
	defer cancel()
	ok, err := m.db.HolderProgressing(dctx, req.Bucket, req.Key, 2*m.cfg.ProgressEvery)
	return err == nil && ok
}
