package notify

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Queue is the SQL the service needs (meta.Targets implements it).
type Queue interface {
	// DeliveryTargets lists the targets, secrets opened.
	DeliveryTargets(ctx context.Context) ([]Target, error)
	// ClaimTarget takes or extends the target's claim for holder, on
	// PostgreSQL's clock; false while another holder's claim is live.
	ClaimTarget(ctx context.Context, target, holder string, claimFor time.Duration) (bool, error)
	ReleaseTarget(ctx context.Context, target, holder string) error
	// Due returns, in queue order, up to limit events of the target that
	// are each their key's first queued event and due: one per key, as the
	// pipeline sends them (pipeline.go).
	Due(ctx context.Context, target string, limit int) ([]Event, error)
	// Delivered removes acknowledged events from their queue: a group
	// together, in one statement (pipeline.go, record).
	Delivered(ctx context.Context, queueIDs []int64) error
	Retry(ctx context.Context, queueID int64, after time.Duration, errText string) error
	DeadLetter(ctx context.Context, queueID int64, errText string) error
	// Backlog is each target's queued and dead-lettered events and its
	// oldest queued event's age.
	Backlog(ctx context.Context) (map[string]Backlog, error)
}

// Backlog is one target's undelivered events.
type Backlog struct {
	Queued, DeadLetters int64
	Lag                 time.Duration
}

// Config tunes the service. Zero values take their defaults.
type Config struct {
	Poll      time.Duration // how often an idle target's queue is read again (500 ms)
	ClaimFor  time.Duration // a target's claim lasts this long unless renewed (15 s)
	Parallel  int           // keys of one target in flight at once (16)
	Batch     int           // events read from the queue at a time (256)
	MaxTries  int           // failed tries before an event becomes a dead letter (10)
	MaxAge    time.Duration // an event older than this (since its commit) whose try fails becomes a dead letter (0: no limit)
	RetryBase time.Duration // first back-off; doubles per try, with jitter (500 ms)
	RetryMax  time.Duration // longest back-off (1 min)
	Timeout   time.Duration // one send, webhook or NATS (10 s)
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Poll, 500*time.Millisecond)
	def(&c.ClaimFor, 15*time.Second)
	def(&c.RetryBase, 500*time.Millisecond)
	def(&c.RetryMax, time.Minute)
	def(&c.Timeout, 10*time.Second)
	if c.Parallel <= 0 {
		c.Parallel = 16
	}
	if c.Batch <= 0 {
		c.Batch = 256
	}
	if c.MaxTries <= 0 {
		c.MaxTries = 10
	}
}

// Service delivers every target's queue while it holds the target's claim.
type Service struct {
	cfg     Config
	q       Queue
	holder  func() string // the gateway's current session; "" while it has none
	log     *slog.Logger
	Metrics *Metrics // optional
	wg      sync.WaitGroup
}

// NewService makes a service delivering as holder: the gateway's current
// session, read at every claim, so a session replaced after it died takes
// its targets' claims over from the dead one ("" while there is none: no
// claim is taken or kept).
func NewService(cfg Config, q Queue, holder func() string, log *slog.Logger) *Service {
	cfg.setDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, q: q, holder: holder, log: log}
}

// Start runs the service until ctx ends; Wait waits for it.
func (s *Service) Start(ctx context.Context) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.run(ctx)
	}()
}

func (s *Service) Wait() { s.wg.Wait() }

type running struct {
	t      Target
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *Service) run(ctx context.Context) {
	active := map[string]*running{}
	defer func() {
		for _, r := range active {
			r.cancel()
			<-r.done
		}
	}()
	tick := time.NewTicker(s.cfg.Poll)
	defer tick.Stop()
	lastBacklog := time.Time{}
	for {
		targets, err := s.q.DeliveryTargets(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("notify: could not read the targets", "err", err)
		}
		if err == nil {
			seen := map[string]bool{}
			for _, t := range targets {
				seen[t.Name] = true
				if r, ok := active[t.Name]; ok && r.t == t {
					continue
				} else if ok { // changed: start again with the new settings
					r.cancel()
					<-r.done
				}
				tctx, cancel := context.WithCancel(ctx)
				r := &running{t: t, cancel: cancel, done: make(chan struct{})}
				active[t.Name] = r
				go func() {
					defer close(r.done)
					s.deliverTarget(tctx, t)
				}()
			}
			for name, r := range active {
				if !seen[name] {
					r.cancel()
					<-r.done
					delete(active, name)
				}
			}
		}
		if s.Metrics != nil && time.Since(lastBacklog) > 5*s.cfg.Poll {
			lastBacklog = time.Now()
			if b, err := s.q.Backlog(ctx); err == nil {
				s.Metrics.backlog(b)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// deliverTarget holds the target's claim whenever it can and delivers its
// queue while it does.
func (s *Service) deliverTarget(ctx context.Context, t Target) {
	snd, err := newSender(t, s.cfg.Timeout)
	if err != nil {
		s.log.Error("notify: target not delivered", "target", t.Name, "err", err)
		return
	}
	defer snd.close()
	var claimedAs string // the session the claim was last taken or renewed under
	defer func() {
		if claimedAs == "" {
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.q.ReleaseTarget(rctx, t.Name, claimedAs)
	}()
	for ctx.Err() == nil {
		held, err := s.claim(ctx, t, &claimedAs)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("notify: could not claim a target", "target", t.Name, "err", err)
		}
		n := 0
		if held {
			n = s.round(ctx, t, snd, &claimedAs)
		}
		if n == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(s.cfg.Poll):
			}
		}
	}
}

// claim takes or renews the target's claim under the gateway's current
// session, noting it in claimedAs; without a session it holds nothing.
func (s *Service) claim(ctx context.Context, t Target, claimedAs *string) (bool, error) {
	holder := s.holder()
	if holder == "" {
		return false, nil
	}
	held, err := s.q.ClaimTarget(ctx, t.Name, holder, s.cfg.ClaimFor)
	if held {
		*claimedAs = holder
	}
	return held, err
}

// round delivers due events under the claim, renewing it meanwhile, until
// nothing is due or in flight (pipeline.go); a claim lost cuts the round. It
// returns how many events it sent.
func (s *Service) round(ctx context.Context, t Target, snd sender, claimedAs *string) int {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(s.cfg.ClaimFor / 3)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
			held, err := s.claim(rctx, t, claimedAs)
			if !held || err != nil {
				s.log.Warn("notify: lost a target's claim mid-round", "target", t.Name, "err", err)
				cancel()
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-renewed
	}()
	p := &pipeline{s: s, t: t, snd: snd, ctx: rctx, cut: cancel,
		busy: map[keyID]bool{}, results: make(chan outcome, s.cfg.Parallel)}
	return p.run()
}

// deliver sends one event and records a failure as a retry or a dead letter;
// it reports whether the target acknowledged the event (the caller records
// that, with others) and, when it scheduled a retry, how far off.
func (s *Service) deliver(ctx context.Context, snd sender, e Event) (acked bool, retryIn time.Duration) {
	sctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	err := snd.send(sctx, e)
	cancel()
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.Debug("notify: sent", "target", e.Target, "event", e.ID(), "queue_id", e.QueueID, "key", e.Key, "generation", e.Generation, "tries", e.Tries, "err", err)
	}
	if err == nil {
		s.Metrics.add(e.Target, "delivered")
		return true, 0
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	if ctx.Err() != nil {
		return false, 0 // the round was cut (claim lost, shutdown): not a try
	}
	s.Metrics.add(e.Target, "failed")
	if e.Tries+1 >= s.cfg.MaxTries || (s.cfg.MaxAge > 0 && time.Since(e.CommittedAt) > s.cfg.MaxAge) {
		s.Metrics.add(e.Target, "dead_lettered")
		s.log.Warn("notify: event dead-lettered", "target", e.Target, "event", e.ID(), "tries", e.Tries+1, "err", err)
		if derr := s.q.DeadLetter(dctx, e.QueueID, err.Error()); derr != nil {
			s.log.Warn("notify: could not dead-letter an event", "target", e.Target, "event", e.ID(), "err", derr)
		}
		return false, 0
	}
	s.Metrics.add(e.Target, "retried")
	after := s.backoff(e.Tries)
	if derr := s.q.Retry(dctx, e.QueueID, after, err.Error()); derr != nil {
		s.log.Warn("notify: could not schedule a retry", "target", e.Target, "event", e.ID(), "err", derr)
		return false, 0
	}
	return false, after
}

// backoff after the tries-th failed try: RetryBase doubled per try up to
// RetryMax, half of it fixed and half random (jitter), so a target that
// comes back is not hit by every key at once.
func (s *Service) backoff(tries int) time.Duration {
	d := s.cfg.RetryBase
	for i := 0; i < tries && d < s.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, s.cfg.RetryMax)
	return d/2 + rand.N(d/2+1)
}
