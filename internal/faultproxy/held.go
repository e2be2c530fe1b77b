package faultproxy

import "sync"

// Held is the test's handle on the requests (Hold) or responses (HoldResponse)
// a rule holds.
//
// Every held request sends one Event on Arrived (buffered for times events,
// 1024 if times is -1; further events are dropped if it is full) and then
// waits for a decision. Release, Fail and Drop each make one decision, which
// goes to the oldest held request that has not had one yet, oldest meaning
// first to send its Arrived event. If no request is waiting, the decision is
// queued and taken, in order, by the next request to arrive (right after its
// Arrived event). So "<-h.Arrived; h.Release()" lets exactly the request
// whose event was received go on, provided earlier events were decided too.
//
// Closing the proxy drops every held request.
type Held struct {
	// Arrived receives an Event once per held request, when it is held.
	Arrived <-chan Event
	// Delivered receives an Event once per request released with
	// ReleaseDetached, when its exchange with the store is over: Status is
	// the store's answer, 0 if the store never answered. For the stall
	// rules, once per stalled exchange when it ends, Whole saying whether it
	// ran whole after all.
	Delivered <-chan Event

	arrived   chan Event
	delivered chan Event
	closing   <-chan struct{}

	order sync.Mutex // keeps the waiting queue and Arrived in the same order

	mu        sync.Mutex
	waiting   []chan decision // oldest first
	queued    []decision      // decisions made while nothing waited
	active    int             // matched requests not finished
	idle      chan struct{}   // closed when active drops to 0
	finishedN int
}

type decisionKind int

const (
	decRelease decisionKind = iota
	decFail
	decDrop
	decReleaseDetached
)

type decision struct {
	kind   decisionKind
	status int
	body   string
}

func newHeld(times int, closing <-chan struct{}) *Held {
	ch := make(chan Event, eventBuffer(times))
	dl := make(chan Event, eventBuffer(times))
	return &Held{Arrived: ch, arrived: ch, Delivered: dl, delivered: dl, closing: closing}
}

// Release lets the oldest undecided held request go on. For Hold: the request
// is forwarded to the store (body streamed) and the response relayed. For
// HoldResponse: the store's response is relayed.
func (h *Held) Release() { h.decide(decision{kind: decRelease}) }

// ReleaseDetached is Release for Hold, except that the request is delivered
// to the store in full even if its client has gone away meanwhile (a request
// already on the wire when its sender gave up): the proxy reads what the
// client sent, forwards it on a connection that the client's departure does
// not close, relays the answer if it still can, and reports the store's
// status on Delivered.
func (h *Held) ReleaseDetached() { h.decide(decision{kind: decReleaseDetached}) }

// Fail answers the oldest undecided held request with status and body (see
// [HTTP.Fail] for the content type). For Hold the store never sees the
// request (its body is read and discarded first); for HoldResponse the store
// did perform it, but its response is discarded and replaced.
func (h *Held) Fail(status int, body string) {
	h.decide(decision{kind: decFail, status: status, body: body})
}

// Drop closes the client connection of the oldest undecided held request
// abruptly (TCP reset), without a response. For Hold the store never sees the
// request; for HoldResponse the store performed it and its response is
// discarded.
func (h *Held) Drop() { h.decide(decision{kind: decDrop}) }

// Wait blocks until every request this rule has matched so far is finished:
// decided and fully handled (its response relayed, or its connection
// closed).
func (h *Held) Wait() {
	h.mu.Lock()
	idle := h.idle
	h.mu.Unlock()
	if idle != nil {
		<-idle
	}
}

// Finished is the number of requests this rule matched that are finished.
func (h *Held) Finished() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.finishedN
}

func (h *Held) decide(d decision) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.waiting) > 0 {
		ch := h.waiting[0]
		h.waiting = h.waiting[1:]
		ch <- d // buffered, never blocks
		return
	}
	h.queued = append(h.queued, d)
}

// arrive signals Arrived and waits for a decision; closing the proxy means
// Drop.
func (h *Held) arrive(ev Event) decision {
	ch := make(chan decision, 1)
	h.order.Lock()
	h.mu.Lock()
	if len(h.queued) > 0 {
		ch <- h.queued[0]
		h.queued = h.queued[1:]
	} else {
		h.waiting = append(h.waiting, ch)
	}
	h.mu.Unlock()
	select {
	case h.arrived <- ev:
	default:
	}
	h.order.Unlock()
	select {
	case d := <-ch:
		return d
	case <-h.closing:
		return decision{kind: decDrop}
	}
}

// begin and end count matched requests for Wait; begin is called when the
// rule picks the request, before it arrives.
func (h *Held) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.active == 0 {
		h.idle = make(chan struct{})
	}
	h.active++
}

func (h *Held) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.active--
	h.finishedN++
	if h.active == 0 {
		close(h.idle)
		h.idle = nil
	}
}
