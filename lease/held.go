package lease

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A held lease: renewal and its local deadline, progress reports, and how it
// ends (Commit, Finish, Close), recording what the write was sent with.

// Lease is a held key lease. It renews itself until Commit or Finish; its
// Context is cancelled if it is lost (a renewal failed or the local deadline
// passed), and the holder's upstream request dies with it.
type Lease struct {
	m           *Manager
	Bucket, Key string
	AttemptID   string
	Op          Kind
	Waited      bool // the key was leased when this writer came, and it waited
	// ReservationBound: the acquire bound Request.Reservation to the
	// attempt (Acquired.ReservationBound).
	ReservationBound bool
	req              Request
	// acquiredState is the key's state read with the lease, for the first
	// Settle; later ones read it again.
	acquiredState *KeyState

	// ctx is cancelled when the lease is lost (markLost).
	ctx      context.Context
	lose     context.CancelFunc
	lostOnce sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	renewer  sync.WaitGroup
	mu       sync.Mutex
	timer    *time.Timer
	finished bool
	// sentWith is the condition the write went to the store with, and
	// checksum the body's, both recorded with the attempt's ending.
	sentWith *string
	checksum string
	// progress, if set, counts the write's bytes so far (see ReportProgress).
	progress func() int64
}

func (m *Manager) newLease(req Request, id string, sent time.Time) *Lease {
	l := &Lease{m: m, Bucket: req.Bucket, Key: req.Key, AttemptID: id, Op: req.Op, req: req,
		stop: make(chan struct{})}
	// Cancelled on loss only: its parent is no context, so an unlost lease's
	// context holds nothing to free.
	l.ctx, l.lose = context.WithCancel(context.Background())
	// The local deadline runs on the monotonic clock from the send time of the
	// call that (re)newed the lease, so it expires no later than the database's.
	l.timer = time.AfterFunc(time.Until(sent.Add(m.cfg.TTL-m.cfg.Margin)), l.markLost)
	m.held.Add(1) // until stopRenewing, which every ending calls
	m.Metrics.Held.Inc()
	l.renewer.Add(1)
	go l.renew()
	return l
}

func (l *Lease) markLost() {
	l.lostOnce.Do(func() {
		l.m.Metrics.Lost.Inc()
		l.lose()
	})
}

// Context is cancelled when the lease is lost: what the holder sends under
// the lease is sent with it, and dies with it (W2).
func (l *Lease) Context() context.Context { return l.ctx }

// Lost is closed when the lease is lost.
func (l *Lease) Lost() <-chan struct{} { return l.ctx.Done() }

// IsLost reports whether the lease has been lost.
func (l *Lease) IsLost() bool { return l.ctx.Err() != nil }

func (l *Lease) renew() {
	defer l.renewer.Done()
	t := time.NewTicker(l.m.cfg.RenewEvery)
	defer t.Stop()
	p := time.NewTicker(l.m.cfg.ProgressEvery)
	defer p.Stop()
	var seen int64
	for {
		select {
		case <-l.stop:
			return
		case <-l.ctx.Done():
			return
		case <-p.C:
			l.noteProgress(&seen)
			continue
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

// ReportProgress gives the lease a count of its write's bytes so far; while
// it grows, the lease records progress every ProgressEvery, so writers
// waiting for the key wait on (up to WaitLimit) instead of giving up.
func (l *Lease) ReportProgress(bytesSoFar func() int64) {
	l.mu.Lock()
	l.progress = bytesSoFar
	l.mu.Unlock()
}

func (l *Lease) noteProgress(seen *int64) {
	l.mu.Lock()
	count := l.progress
	l.mu.Unlock()
	if count == nil {
		return
	}
	n := count()
	if n == *seen {
		return
	}
	*seen = n
	ctx, cancel := l.m.dbctx(context.Background())
	defer cancel()
	_ = l.m.db.Progress(ctx, l.Bucket, l.Key, l.AttemptID)
}

func (l *Lease) stopRenewing() {
	l.m.sess.drop(l)
	l.stopOnce.Do(func() {
		l.m.held.Add(-1)
		l.m.Metrics.Held.Dec()
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
	// The generation names the attempt id its bytes carry: a Complete try's
	// upload (tagged at CreateMultipartUpload), else the attempt itself.
	onBytes := l.AttemptID
	if l.req.UploadAttempt != "" {
		onBytes = l.req.UploadAttempt
	}
	e := Entry{ETag: landed.ETag, Size: landed.Size, Deleted: landed.Deleted,
		Origin: OriginFencegate, AttemptID: onBytes}
	dctx, cancel := l.m.dbctx(ctx)
	defer cancel()
	cp := CommitParams{
		Bucket: l.Bucket, Key: l.Key, Holder: l.AttemptID,
		Settled: l.AttemptID, SettledState: StateCommitted, Entry: e, Release: true,
	}
	gen, handed, err := l.commitHandingOver(dctx, cp)
	l.stopRenewing()
	if err != nil {
		reason := "commit failed after the store acknowledged: " + err.Error()
		if errors.Is(err, ErrLeaseLost) {
			reason = "lease lost before the commit; the store acknowledged the write"
		}
		l.m.Metrics.Unknown.Inc()
		l.finish(StateUnknown, reason)
		return 0, err
	}
	l.mu.Lock()
	l.finished = true
	l.mu.Unlock()
	l.m.Metrics.Commits.Inc()
	if !handed {
		l.m.queues.released([2]string{l.Bucket, l.Key})
	}
	return gen, nil
}

// commitHandingOver commits; if a writer of this gateway waits for the key,
// parked, the commit hands it the lease in the same transaction (handed),
// so a hot key costs one round trip per write, not a commit and an acquire.
func (l *Lease) commitHandingOver(ctx context.Context, cp CommitParams) (gen int64, handed bool, err error) {
	next, np := l.m.queues.claimHead([2]string{l.Bucket, l.Key})
	var sid string
	var epoch uint64
	if next != nil {
		var serr error
		if sid, epoch, serr = l.m.sess.current(); serr != nil {
			// No session to lease the key under: the waiter asks itself.
			l.m.queues.handOver(next, handOff{})
			next = nil
		}
	}
	if next == nil {
		gen, err = l.m.db.Commit(ctx, cp)
		return gen, false, err
	}
	np.Session, np.Wait, np.TTL = sid, false, l.m.cfg.TTL
	sent := time.Now()
	gen, acq, err := l.m.db.CommitHandOver(ctx, cp, np)
	l.m.queues.handOver(next, handOff{acq: acq, id: np.Attempt.ID, sent: sent, epoch: epoch})
	return gen, acq != nil, err
}

// Finish ends the attempt without a commit and releases the lease: failed
// (proven not written) or unknown (may have landed: kept as a guard).
func (l *Lease) Finish(state, reason string) {
	l.stopRenewing()
	if state == StateUnknown {
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
	end := Ending{State: state, Reason: reason, Fence: l.sentWith, Checksum: l.checksum}
	l.mu.Unlock()
	l.m.release(l.Bucket, l.Key, l.AttemptID, end)
}

// release frees holder's lease and records how its attempt ended, on a fresh
// context (the request's may be gone), and wakes the key's waiters here. If
// PostgreSQL does not take it, it is tried again in the background: nothing
// renews the lease any more, but its gateway's session keeps it live until
// its TTL runs out, and until then every writer of the key would wait.
func (m *Manager) release(bucket, key, holder string, end Ending) {
	if !m.releaseOnce(bucket, key, holder, end) {
		go m.releaseAgain(bucket, key, holder, end, time.Now().Add(m.cfg.TTL))
	}
}

// releaseOnce sends the release once and, if PostgreSQL took it, wakes the
// key's waiters here.
func (m *Manager) releaseOnce(bucket, key, holder string, end Ending) bool {
	ctx, cancel := m.dbctx(context.Background())
	err := m.db.Release(ctx, bucket, key, holder, end)
	cancel()
	if err != nil {
		return false
	}
	m.queues.released([2]string{bucket, key})
	return true
}

// Pauses between tries of a release that failed: short at first (a dropped
// connection, a failover), growing while PostgreSQL stays away.
const (
	releaseRetryFirst = 50 * time.Millisecond
	releaseRetryMax   = 2 * time.Second
)

// releaseAgain tries a failed release again until one is taken or until
// expired, when the lease has run out anyway (the next writer takes the key
// over, and the attempt, if still leased, becomes unknown and is settled).
// Late is safe: the release frees the lease only while holder still holds it,
// and moves the attempt's state only from leased.
func (m *Manager) releaseAgain(bucket, key, holder string, end Ending, expired time.Time) {
	for pause := releaseRetryFirst; ; pause = min(2*pause, releaseRetryMax) {
		time.Sleep(pause)
		if time.Now().After(expired) {
			m.Metrics.ReleaseRetries.WithLabelValues("expired").Inc()
			return
		}
		if m.releaseOnce(bucket, key, holder, end) {
			m.Metrics.ReleaseRetries.WithLabelValues("released").Inc()
			return
		}
	}
}

// Sending records the condition the write goes to the store with: f when
// ours, none ("") when the client sent its own or the write is unfenced. It
// decides which later commits can retire this attempt's guard if its outcome
// is unknown (a delete re-opens If-None-Match: *).
func (l *Lease) Sending(f Fence, ours bool) {
	v := ""
	switch {
	case ours && f.Exists:
		v = f.ETag
	case ours:
		v = "*"
	}
	l.mu.Lock()
	l.sentWith = &v
	l.mu.Unlock()
}

// notSent takes back Sending: the request was refused before any byte
// went out.
func (l *Lease) notSent() {
	l.mu.Lock()
	l.sentWith = nil
	l.mu.Unlock()
}

// SentChecksum records the checksum the body went to the store with
// ("crc32:<base64>"), so an unknown outcome is adopted only if the store's
// object has it.
func (l *Lease) SentChecksum(c string) {
	l.mu.Lock()
	l.checksum = c
	l.mu.Unlock()
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
		l.Finish(StateUnknown, "the request ended without an answer from the store")
	} else {
		l.Finish(StateFailed, "nothing was sent to the store")
	}
}
