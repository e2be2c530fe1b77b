package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencegate/fencegate/store"
)

// The lifecycle service (docs/DESIGN.md, "The reconciler"): every gateway
// runs it. A pass runs each work kind in turn, each for at most its own
// budget, so one slow kind cannot starve another; a kind's pass claims
// batches (at most 100 items, oldest first, FOR UPDATE SKIP LOCKED, a claim
// token and a counted try stamped before any storage I/O) until a short
// batch or its budget runs out. A store failure keeps the item claimed and
// pushes its next try back; nothing is given up or marked failed for it.

// Work kinds.
const (
	KindUnresolved = "unresolved" // keys with unknown attempts or dead holders: settled
	KindUploads    = "uploads"    // multipart Creates without a recorded upload id: bound or failed; abandoned uploads: aborted
	KindAudit      = "audit"      // the incremental bucket audit: divergence settled, foreign uploads found
	KindPrune      = "prune"      // settled attempts, acknowledged outbox rows, idle lease rows, ended reservations: deleted
)

// Kinds lists every work kind, in the order a pass runs them.
var Kinds = []string{KindUnresolved, KindUploads, KindAudit, KindPrune, KindReservations}

// Foreign upload policies: what the audit does with a multipart upload it
// finds at the store that fencegate did not create.
const (
	ForeignReport = "report" // record and report it (fencegate status, fencegate audit); never abort
	ForeignAbort  = "abort"  // abort it once it is older than ForeignUploadAge
)

// DefaultUploadCreateSettle is how old a multipart attempt without a
// recorded upload id must be before the uploads kind looks for its upload at
// the store. A minute: far longer than a CreateMultipartUpload takes, so the
// store has long finished any Create the gateway gave up on and an attempt
// still open without an id is almost never a Create in flight (binding one
// would be harmless: its own answer records the same id); and short beside
// --upload-abandoned-after, so such an upload is soon bound, cleaned up like
// any other and no longer reported by the audit. It does not follow the
// reconcile interval, which tests shorten to milliseconds: the delay is
// about the store and the Create, not the reconciler's cadence.
const DefaultUploadCreateSettle = time.Minute

// LifecycleConfig tunes the service. Zero values take their defaults.
type LifecycleConfig struct {
	Interval time.Duration // between passes (20 s); a pass also runs at start-up
	Budget   time.Duration // per work kind per pass (5 s)
	Batch    int           // items claimed per batch, 1..100 (100)
	ClaimFor time.Duration // how long a claim keeps other gateways off an item (2 x lease TTL)
	// RetryAfter is the first back-off after a store failure; it doubles per
	// try up to ClaimFor (1 s).
	RetryAfter time.Duration
	// UploadIdle: an open upload fencegate created whose creation and last
	// part are older than this is abandoned and aborted (24 h).
	UploadIdle time.Duration
	// UploadCreateSettle: a multipart attempt whose CreateMultipartUpload
	// left no upload id in the catalog (its outcome unknown, or the store's
	// answer came but its id could not be recorded) is looked for at the
	// store once it is this old, and bound to the upload found there (1 min).
	UploadCreateSettle time.Duration
	// UploadCreateGiveUp: such an attempt for which no upload is found this
	// long after its Create is marked failed (10 x UploadCreateSettle).
	UploadCreateGiveUp time.Duration
	// ForeignUploads is the policy for uploads created straight at the store
	// ("report", the default, or "abort"); ForeignUploadAge is the age (since
	// the store's Initiated) after which "abort" aborts them (7 days).
	ForeignUploads   string
	ForeignUploadAge time.Duration
	AuditPage        int           // keys per ListObjectsV2 page of the incremental audit (1000)
	AuditRest        time.Duration // a bucket's audit waits this long between pages (Interval)
	AuditBuckets     []string      // audit only these buckets (default: every bucket the catalog knows)
	Retention        Retention
	// Kinds run (default: all of Kinds).
	Kinds []string
	// At is told each step of a reservation's sweep as it is reached, with
	// the reservation's bucket and key (the tests' failpoints, set by the
	// gateway's test build); nil: nobody listens.
	At func(st Step, bucket, key string)
}

// Validate refuses a configuration the service cannot run with.
func (c LifecycleConfig) Validate() error {
	for _, d := range []time.Duration{c.Interval, c.Budget, c.ClaimFor, c.RetryAfter, c.UploadIdle, c.UploadCreateSettle, c.UploadCreateGiveUp,
		c.ForeignUploadAge, c.AuditRest, c.Retention.Attempts, c.Retention.Outbox, c.Retention.Leases} {
		if d < 0 {
			return errors.New("reconciler durations must not be negative")
		}
	}
	switch {
	case c.Batch < 0 || c.Batch > 100:
		return errors.New("reconciler batch must be between 1 and 100")
	case c.AuditPage < 0 || c.AuditPage > 1000:
		return errors.New("audit page must be between 1 and 1000 keys")
	case c.ForeignUploads != "" && c.ForeignUploads != ForeignReport && c.ForeignUploads != ForeignAbort:
		return fmt.Errorf("foreign upload policy %q: want report or abort", c.ForeignUploads)
	}
	settle := c.UploadCreateSettle
	if settle == 0 {
		settle = DefaultUploadCreateSettle
	}
	if c.UploadCreateGiveUp > 0 && c.UploadCreateGiveUp < settle {
		return errors.New("the give-up age of unrecorded multipart Creates must not be shorter than their settle delay")
	}
	for _, k := range c.Kinds {
		if !knownKind(k) {
			return fmt.Errorf("unknown reconciler work kind %q", k)
		}
	}
	return nil
}

func knownKind(k string) bool {
	for _, x := range Kinds {
		if x == k {
			return true
		}
	}
	return false
}

func (c *LifecycleConfig) setDefaults(ttl time.Duration) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Interval, 20*time.Second)
	def(&c.Budget, 5*time.Second)
	def(&c.ClaimFor, 2*ttl)
	def(&c.RetryAfter, time.Second)
	def(&c.UploadIdle, 24*time.Hour)
	def(&c.UploadCreateSettle, DefaultUploadCreateSettle)
	def(&c.UploadCreateGiveUp, 10*c.UploadCreateSettle)
	def(&c.ForeignUploadAge, 7*24*time.Hour)
	def(&c.AuditRest, c.Interval)
	if c.Batch == 0 {
		c.Batch = 100
	}
	if c.AuditPage == 0 {
		c.AuditPage = 1000
	}
	if c.ForeignUploads == "" {
		c.ForeignUploads = ForeignReport
	}
	if len(c.Kinds) == 0 {
		c.Kinds = Kinds
	}
}

// Claim is how long a claim on a reconciler's work item (an unresolved key,
// an upload, an audit cursor, an ended reservation) keeps other gateways off
// it: For, or until Session, the claiming gateway's database session, ends,
// whichever comes first. So a crashed gateway's items are taken over when
// its keys' leases are (SessionTimeout), not after a claim period. Without
// a Session (a tool, or a gateway whose session is down) it lasts For. A
// back-off after a failed try is a wait, not a claim: it binds no session.
type Claim struct {
	For     time.Duration
	Session string
}

// claim is a claim for d bound to this gateway's session while it is up
// (current names none while it is down).
func (m *Manager) claim(d time.Duration) Claim {
	sid, _, _ := m.sess.current()
	return Claim{For: d, Session: sid}
}

// LifecycleDriver is the SQL the service needs beyond Driver (Catalog
// implements it).
type LifecycleDriver interface {
	ClaimAbandonedUploads(ctx context.Context, limit int, idle time.Duration, claim Claim) ([]AbandonedUpload, error)
	ClaimUnboundUploads(ctx context.Context, limit int, settle time.Duration, claim Claim) ([]UploadWithoutID, error)
	UnboundUploads(ctx context.Context, bucket, key string) ([]UploadWithoutID, error)
	BoundUploads(ctx context.Context, ids []string) (map[string]bool, error)
	BindUpload(ctx context.Context, attemptID, uploadID string) (bool, error)
	UnboundFailed(ctx context.Context, attemptID, reason string) error
	UploadActive(ctx context.Context, attemptID string, at time.Time) error
	Unclaim(ctx context.Context, attemptID string, untried bool) error
	UploadAbortable(ctx context.Context, attemptID string) (bool, error)
	UploadAborted(ctx context.Context, attemptID, reason string) error
	RetryLater(ctx context.Context, attemptID string, backoff time.Duration, errText string) error
	ClaimAuditCursor(ctx context.Context, only []string, claim Claim) (Cursor, bool, error)
	AdvanceAuditCursor(ctx context.Context, cur Cursor, roundDone bool, rest time.Duration) error
	AuditCursorFailed(ctx context.Context, bucket string, backoff time.Duration, errText string) error
	CatalogRange(ctx context.Context, bucket, prefix, after, upto string) (map[string]Entry, error)
	UploadTracked(ctx context.Context, uploadID string) (bool, error)
	ForeignUploadSeen(ctx context.Context, bucket, key, uploadID string, initiated time.Time, aborted bool) error
	Prune(ctx context.Context, r Retention, limit int) (Pruned, error)
	RecordPass(ctx context.Context, p Pass) error
}

// LifecycleStore is the storage I/O the service needs (*store.Client fills
// it as it is).
type LifecycleStore interface {
	Store
	ListPage(ctx context.Context, bucket, prefix, after string, max int) (store.Page, error)
	ListMultipartUploads(ctx context.Context, bucket, keyMarker, uploadMarker string, max int) (store.UploadsPage, error)
	// KeyUploads lists the uploads in progress at exactly key.
	KeyUploads(ctx context.Context, bucket, key string) ([]store.Upload, error)
	// LastPart is the upload's newest part's upload time (zero: no parts)
	// and its number of parts.
	LastPart(ctx context.Context, bucket, key, uploadID string) (time.Time, int, error)
	// AbortMultipartUpload answers store.store.ErrNoSuchUpload for an upload the
	// store does not know (any more).
	AbortMultipartUpload(ctx context.Context, bucket, key, uploadID string) error
}

// Counts is what one batch or pass of a work kind did with its items.
type Counts struct {
	Claimed   int // items claimed (a try counted on each)
	Completed int // settled, aborted, audited, pruned
	Retried   int // a store failure: kept claimed, tried again after a back-off
	Skipped   int // nothing to do now (a live writer holds the key, the upload is active)
	Failed    int // a database failure: the claim runs out and the item is tried again
}

func (c *Counts) add(o Counts) {
	c.Claimed += o.Claimed
	c.Completed += o.Completed
	c.Retried += o.Retried
	c.Skipped += o.Skipped
	c.Failed += o.Failed
}

// BatchResult is one batch of one work kind (a test signal).
type BatchResult struct {
	Kind     string
	Counts   Counts
	Duration time.Duration
	Err      error
}

// KindResult is one work kind's part of a pass.
type KindResult struct {
	Kind     string
	Batches  int
	Counts   Counts
	Duration time.Duration
	// OverBudget: the pass stopped this kind because its budget ran out.
	OverBudget bool
}

// PassResult is one pass of the service.
type PassResult struct {
	Kinds    []KindResult
	Duration time.Duration
}

// Kind finds a kind's part of the pass.
func (p PassResult) Kind(kind string) KindResult {
	for _, k := range p.Kinds {
		if k.Kind == kind {
			return k
		}
	}
	return KindResult{Kind: kind}
}

// Signals are typed test signals, each called (if set) after its step.
type Signals struct {
	Batch func(BatchResult)
	Kind  func(KindResult)
	Pass  func(PassResult)
}

// Service is the reconciler's lifecycle service.
type Service struct {
	cfg     LifecycleConfig
	m       *Manager
	db      LifecycleDriver
	store   LifecycleStore
	log     *slog.Logger
	rec     *Reconciler
	Metrics *LifecycleMetrics
	Signals Signals

	mu   sync.Mutex
	done chan struct{}
}

// NewService makes the service; cfg must pass Validate.
func NewService(cfg LifecycleConfig, m *Manager, db LifecycleDriver, store LifecycleStore, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults(m.cfg.TTL)
	if log == nil {
		log = slog.Default()
	}
	rec := NewReconciler(ReconcilerConfig{Interval: cfg.Interval, Batch: cfg.Batch, ClaimFor: cfg.ClaimFor, RetryAfter: cfg.RetryAfter}, m, store, log)
	return &Service{cfg: cfg, m: m, db: db, store: store, log: log, rec: rec, Metrics: NewLifecycleMetrics(nil)}, nil
}

// at tells cfg.At that the sweep of e reached st.
func (s *Service) at(st Step, e EndedReservation) {
	if s.cfg.At != nil {
		s.cfg.At(st, e.Bucket, e.Key)
	}
}

// Start runs a pass at once, then one every Interval, until ctx ends. Wait
// returns once the running pass has finished after that.
func (s *Service) Start(ctx context.Context) {
	s.mu.Lock()
	s.done = make(chan struct{})
	done := s.done
	s.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			s.RunOnce(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Wait returns when the service started by Start has stopped.
func (s *Service) Wait() {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

// RunOnce runs one pass: every work kind, each within its budget.
func (s *Service) RunOnce(ctx context.Context) PassResult {
	start := time.Now()
	var pass PassResult
	for _, kind := range s.cfg.Kinds {
		if ctx.Err() != nil {
			break
		}
		kr := s.runKind(ctx, kind)
		pass.Kinds = append(pass.Kinds, kr)
		if s.Signals.Kind != nil {
			s.Signals.Kind(kr)
		}
	}
	pass.Duration = time.Since(start)
	s.updateGauges(ctx)
	if s.Signals.Pass != nil {
		s.Signals.Pass(pass)
	}
	return pass
}

// runKind loops over one kind's batches until a short batch or its budget.
func (s *Service) runKind(ctx context.Context, kind string) KindResult {
	start := time.Now()
	kr := KindResult{Kind: kind}
	for ctx.Err() == nil {
		if time.Since(start) >= s.cfg.Budget {
			kr.OverBudget = true
			break
		}
		bstart := time.Now()
		c, full, err := s.batch(ctx, kind, start.Add(s.cfg.Budget))
		br := BatchResult{Kind: kind, Counts: c, Duration: time.Since(bstart), Err: err}
		kr.Batches++
		kr.Counts.add(c)
		s.Metrics.count(kind, c)
		if s.Signals.Batch != nil {
			s.Signals.Batch(br)
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("reconciler batch failed; it is tried again in the next pass", "kind", kind, "err", err)
			}
			break
		}
		if !full {
			break
		}
	}
	kr.Duration = time.Since(start)
	dctx, cancel := s.m.dbctx(context.WithoutCancel(ctx))
	defer cancel()
	if err := s.db.RecordPass(dctx, Pass{Kind: kind, Gateway: s.m.cfg.Gateway, StartedAt: start, Duration: kr.Duration,
		Batches: kr.Batches, Claimed: kr.Counts.Claimed, Completed: kr.Counts.Completed, Retried: kr.Counts.Retried,
		Skipped: kr.Counts.Skipped, Failed: kr.Counts.Failed}); err != nil && ctx.Err() == nil {
		s.log.Warn("could not record a reconciler pass", "kind", kind, "err", err)
	}
	return kr
}

// batch runs one batch of kind; full reports that more may be waiting.
func (s *Service) batch(ctx context.Context, kind string, deadline time.Time) (Counts, bool, error) {
	switch kind {
	case KindUnresolved:
		res, err := s.rec.RunOnce(ctx)
		return Counts{Claimed: res.Claimed, Completed: res.Settled, Skipped: res.Busy, Retried: res.Errors},
			res.Claimed == s.cfg.Batch, err
	case KindUploads:
		return s.uploadsBatch(ctx, deadline)
	case KindAudit:
		return s.auditBatch(ctx)
	case KindReservations:
		return s.reservationsBatch(ctx)
	case KindPrune:
		dctx, cancel := s.m.dbctx(ctx)
		defer cancel()
		p, err := s.db.Prune(dctx, s.cfg.Retention, 10*s.cfg.Batch)
		n := p.Attempts + p.Outbox + p.Leases + p.Reservations
		full := p.Attempts == 10*s.cfg.Batch || p.Outbox == 10*s.cfg.Batch || p.Leases == 10*s.cfg.Batch ||
			p.Reservations == 10*s.cfg.Batch
		return Counts{Claimed: n, Completed: n}, full, err
	}
	return Counts{}, false, fmt.Errorf("unknown work kind %q", kind)
}

// backoff is the wait before the next try of an item tried `tries` times.
func (s *Service) backoff(tries int) time.Duration {
	d := s.cfg.RetryAfter
	for i := 1; i < tries && d < s.cfg.ClaimFor; i++ {
		d *= 2
	}
	return min(d, s.cfg.ClaimFor)
}

// itemBudget bounds one item's storage I/O.
const itemBudget = 30 * time.Second
