package notify

import (
	"context"
	"log/slog"
	"time"
)

// A pipeline is one round's delivery of a target under its claim: due events
// sent as their keys come free, until nothing is due or in flight.
//
// A key has at most one event in flight: its first queued one (Due), sent
// once its previous event's acknowledgement is recorded or its retry
// scheduled, so a crash can only resend the event sent last, never one older
// than an event already received. Keys go on independently: a key whose
// receiver stalls holds only itself, not a whole batch (a round used to wait
// for its slowest send). Acknowledgements are recorded in groups, one
// statement for all that came in while the previous one ran or within
// ackLinger, instead of one transaction per event. The queue is read again
// after a group, at most every readGap while sends are out, every Poll while
// only slow sends are out, and when a failed send's retry falls due: a round
// lasts while a retry is due within Poll, so a retry waits for its back-off,
// not for the target's next poll.
type pipeline struct {
	s   *Service
	t   Target
	snd sender
	ctx context.Context // the round's: cut when the claim is lost
	cut context.CancelFunc

	busy     map[keyID]bool // keys with an event in flight or acknowledged, not yet recorded
	inflight int
	sent     int
	results  chan outcome
	retries  []time.Time // scheduled retries not yet read again
	lastRead time.Time
}

type keyID struct{ bucket, key string }

// outcome is one send's end.
type outcome struct {
	e       Event
	acked   bool
	retryAt time.Time // when its retry is due, if one was scheduled
}

const (
	// ackLinger is how long a round waits after an acknowledgement for
	// others to record with it, while other sends are out.
	ackLinger = 2 * time.Millisecond
	// readGap paces the reads while sends are out. The read (each key's
	// first event) is the round's costly statement: read after every
	// group it cost PostgreSQL more CPU than the PUTs it follows.
	readGap = 10 * time.Millisecond
)

func (p *pipeline) run() int {
	poll := time.NewTimer(0)
	defer poll.Stop()
	read := true
	for {
		next := p.nextRead()
		if read && p.ctx.Err() == nil && p.inflight < p.s.cfg.Parallel {
			if wait := readGap - time.Since(p.lastRead); p.inflight > 0 && wait > 0 {
				poll.Reset(min(wait, next))
			} else {
				read = false
				p.sendDue()
				next = p.nextRead()
				poll.Reset(next)
			}
		}
		if p.inflight == 0 && (p.ctx.Err() != nil || next >= p.s.cfg.Poll) {
			// A retry further off than Poll is the next round's.
			return p.sent
		}
		var cut <-chan struct{} // only a round waiting for a retry alone
		if p.inflight == 0 {
			cut = p.ctx.Done()
		}
		// Wait for a send to end, or for the poll (the pace, a retry):
		// then read again.
		var acked []Event
		select {
		case o := <-p.results:
			acked = p.take(o, acked)
			// The acknowledgements that follow within ackLinger join
			// this group, unless nothing else is out.
			linger := time.NewTimer(ackLinger)
		collect:
			for p.inflight > 0 {
				select {
				case o := <-p.results:
					acked = p.take(o, acked)
				case <-linger.C:
					break collect
				}
			}
			linger.Stop()
		case <-poll.C:
		case <-cut:
		}
		read = true
		p.record(acked)
	}
}

// sendDue reads the queue and sends each due event whose key is free, while
// there is room.
func (p *pipeline) sendDue() {
	p.lastRead = time.Now()
	evs, err := p.s.q.Due(p.ctx, p.t.Name, p.s.cfg.Batch)
	if err != nil && p.ctx.Err() == nil {
		p.s.log.Warn("notify: could not read a target's queue", "target", p.t.Name, "err", err)
	}
	var ids []int64
	for _, e := range evs {
		k := keyID{e.Bucket, e.Key}
		if p.busy[k] || p.inflight >= p.s.cfg.Parallel {
			continue
		}
		p.busy[k] = true
		p.inflight++
		p.sent++
		ids = append(ids, e.QueueID)
		go func() {
			acked, retryIn := p.s.deliver(p.ctx, p.snd, e)
			o := outcome{e: e, acked: acked}
			if retryIn > 0 {
				// Due on PostgreSQL's clock at the Retry's commit
				// plus retryIn: no later than this.
				o.retryAt = time.Now().Add(retryIn)
			}
			p.results <- o
		}()
	}
	if len(ids) > 0 && p.s.log.Enabled(p.ctx, slog.LevelDebug) {
		p.s.log.Debug("notify: sending", "target", p.t.Name, "queue_ids", ids)
	}
}

// take notes a send's end: a failed key is free at once (its retry or dead
// letter is recorded), an acknowledged one joins the group to record.
func (p *pipeline) take(o outcome, acked []Event) []Event {
	p.inflight--
	if o.acked {
		acked = append(acked, o.e)
	} else {
		delete(p.busy, keyID{o.e.Bucket, o.e.Key})
	}
	if !o.retryAt.IsZero() {
		p.retries = append(p.retries, o.retryAt)
	}
	return acked
}

// record removes a group of acknowledged events from the queue, in one
// statement, and frees their keys.
func (p *pipeline) record(acked []Event) {
	if len(acked) == 0 {
		return
	}
	ids := make([]int64, len(acked))
	for i, e := range acked {
		ids[i] = e.QueueID
	}
	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := p.s.q.Delivered(dctx, ids)
	cancel()
	if err != nil {
		// Sent but not recorded: sent again (at least once), the key's
		// last event, in order.
		p.s.log.Warn("notify: could not record deliveries", "target", p.t.Name, "events", len(ids), "err", err)
		p.cut()
	}
	for _, e := range acked {
		delete(p.busy, keyID{e.Bucket, e.Key})
	}
}

// nextRead is how long until the queue should be read again: Poll, or sooner
// when a retry falls due (at once if it fell due during the last read);
// retries due before the last read began are forgotten.
func (p *pipeline) nextRead() time.Duration {
	d := p.s.cfg.Poll
	kept := p.retries[:0]
	for _, at := range p.retries {
		if at.After(p.lastRead) {
			kept = append(kept, at)
			d = max(0, min(d, time.Until(at)))
		}
	}
	p.retries = kept
	return d
}
