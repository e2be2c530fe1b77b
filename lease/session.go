package lease

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNoSession: this gateway's session is down (it could not heartbeat before
// its local deadline, or its session was found dead), so it takes no writes
// until a heartbeat succeeds again or a new session is open (503).
var ErrNoSession = errors.New("the gateway's database session is down")

// session is this gateway process's session (docs/DESIGN.md, "Gateway
// sessions"): a row on PostgreSQL's clock, extended every SessionHeartbeat to
// SessionTimeout ahead. Every key lease the Manager takes names it, and a
// lease counts as live only while its session is alive too, so a crashed or
// partitioned gateway's keys are free after SessionTimeout, not after TTL.
//
// Locally the session has a deadline on the monotonic clock: the last
// successful heartbeat's send time + SessionTimeout - SessionMargin, before
// the row's expiry on the database clock. When it passes, every lease held
// under the session is marked lost (its upstream request is cut, as for a
// key lease's own deadline) and Acquire refuses writes (ErrNoSession) until
// a heartbeat succeeds again; a session found dead is never revived: a new
// one is opened.
type session struct {
	m *Manager

	mu       sync.Mutex
	id       string // the session's id; "" once it is found dead (a new one is to be opened)
	up       bool   // alive by the local deadline
	epoch    uint64 // counts the times the session came up: a lease taken in an earlier epoch is lost
	deadline time.Time
	timer    *time.Timer
	leases   map[*Lease]struct{}
	ended    bool

	stop chan struct{}
	done chan struct{}
}

// StartSession opens this gateway's session and keeps it alive until
// EndSession. Without one (tests, tools), leases live on their own expiry.
func (m *Manager) StartSession(ctx context.Context) error {
	if m.sess != nil {
		return errors.New("the session is already started")
	}
	s := &session{m: m, leases: map[*Lease]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	sent := time.Now()
	dctx, cancel := m.dbctx(ctx)
	id, err := m.db.OpenSession(dctx, m.cfg.Gateway, m.cfg.SessionTimeout)
	cancel()
	if err != nil {
		return err
	}
	s.timer = time.AfterFunc(time.Hour, s.expire)
	s.id = id
	s.extend(id, sent)
	m.sess = s
	go s.run()
	return nil
}

// EndSession ends the session on a clean shutdown, after in-flight writes
// finished or were cut: every lease still held under it is marked lost here
// and is free for others at once.
func (m *Manager) EndSession(ctx context.Context) error {
	s := m.sess
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil
	}
	s.ended = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	id := s.id
	s.mu.Unlock()
	s.lose(false)
	if id == "" {
		return nil
	}
	dctx, cancel := m.dbctx(ctx)
	defer cancel()
	return m.db.EndSession(dctx, id)
}

// SessionID is the session's id while it is alive, "" while it is down or
// when the Manager has none.
func (m *Manager) SessionID() string {
	if m.sess == nil {
		return ""
	}
	m.sess.mu.Lock()
	defer m.sess.mu.Unlock()
	if !m.sess.up {
		return ""
	}
	return m.sess.id
}

// Writable is ErrNoSession while the gateway's session is down (no lease
// can be taken: every write is refused), nil otherwise. Checks that would
// reach the database before a write's lease (a reservation's) ask it
// first, so a gateway cut off from PostgreSQL refuses at once.
func (m *Manager) Writable() error {
	_, _, err := m.sess.current()
	return err
}

// current is the session a new lease is taken under, and its epoch.
func (s *session) current() (string, uint64, error) {
	if s == nil {
		return "", 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up {
		return "", 0, ErrNoSession
	}
	return s.id, s.epoch, nil
}

// hold registers a lease taken under epoch, so a lost session marks it lost;
// false if the session went down meanwhile.
func (s *session) hold(l *Lease, epoch uint64) bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up || s.epoch != epoch {
		return false
	}
	s.leases[l] = struct{}{}
	return true
}

func (s *session) drop(l *Lease) {
	if s == nil {
		return
	}
	s.mu.Lock()
	delete(s.leases, l)
	s.mu.Unlock()
}

func (s *session) run() {
	defer close(s.done)
	t := time.NewTicker(s.m.cfg.SessionHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.beat()
	}
}

// callTimeout bounds a heartbeat: one that returns after the local deadline
// it would extend is of no use.
func (s *session) callTimeout() time.Duration {
	return min(s.m.cfg.DBTimeout, s.m.cfg.SessionTimeout-s.m.cfg.SessionMargin)
}

func (s *session) beat() {
	s.mu.Lock()
	id := s.id
	s.mu.Unlock()
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.callTimeout())
	defer cancel()
	if id == "" {
		// The last session was found dead: its keys may be others' now, so a
		// new one is opened rather than the dead one revived.
		nid, err := s.m.db.OpenSession(ctx, s.m.cfg.Gateway, s.m.cfg.SessionTimeout)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.id = nid
		s.mu.Unlock()
		s.extend(nid, sent)
		return
	}
	alive, live, err := s.m.db.Heartbeat(ctx, id, s.m.cfg.SessionTimeout)
	if err != nil {
		return // the local deadline decides
	}
	s.m.Metrics.SessionsAlive.Set(float64(live))
	if !alive {
		s.lose(true)
		return
	}
	s.extend(id, sent)
}

// extend moves the local deadline to sent + SessionTimeout - SessionMargin
// after a successful heartbeat (or open) sent at sent, and brings the session
// up if it was down.
func (s *session) extend(id string, sent time.Time) {
	d := sent.Add(s.m.cfg.SessionTimeout - s.m.cfg.SessionMargin)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.id != id || !time.Now().Before(d) {
		return
	}
	if !s.up {
		s.up = true
		s.epoch++
		s.m.Metrics.SessionUp.Set(1)
	}
	s.deadline = d
	s.timer.Reset(time.Until(d))
}

// expire runs when the local deadline timer fires.
func (s *session) expire() {
	s.mu.Lock()
	passed := !time.Now().Before(s.deadline)
	s.mu.Unlock()
	if passed {
		s.lose(false)
	}
}

// lose takes the session down: every lease held under it is marked lost.
// dead: the database said the session is dead, so a new one must be opened.
func (s *session) lose(dead bool) {
	s.mu.Lock()
	if dead {
		s.id = ""
	}
	wasUp := s.up
	s.up = false
	held := s.leases
	s.leases = map[*Lease]struct{}{}
	s.timer.Stop()
	s.mu.Unlock()
	if wasUp {
		s.m.Metrics.SessionUp.Set(0)
		if !s.isEnded() {
			s.m.Metrics.SessionsLost.Inc()
		}
	}
	for l := range held {
		l.markLost()
	}
}

func (s *session) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}
