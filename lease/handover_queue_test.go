package lease

import (
	"testing"
	"time"
)

// The queue logic alone (no database): who is woken by what, and how long
// the head polls.

func woken(w *waiter) string {
	select {
	case why := <-w.wake:
		return why
	default:
		return ""
	}
}

// A notification wakes the head of the queue of the key with that hash,
// and nobody else.
func TestQueueNotificationWakesOnlyThatKeysHead(t *testing.T) {
	var q keyQueues
	k1, k2 := [2]string{"b", "one"}, [2]string{"b", "two"}
	h1, w1b := q.join(k1), q.join(k1)
	h2 := q.join(k2)
	if q.notified(KeyHash("b", "three")) {
		t.Fatal("a notification for a key nobody here waits for matched")
	}
	if !q.notified(KeyHash("b", "one")) {
		t.Fatal("the notification for b/one matched no queue")
	}
	if got := [3]string{woken(h1), woken(w1b), woken(h2)}; got != [3]string{wokenNotify, "", ""} {
		t.Fatalf("woken %q, want only b/one's head, by notify", got)
	}
}

// A release here wakes the head; the head leaving without the key wakes the
// next; a waiter behind the head leaving wakes nobody, nor does a head that
// took the key (its release will); the last one out removes the queue.
func TestQueueHandOverAndLeave(t *testing.T) {
	var q keyQueues
	k := [2]string{"b", "k"}
	a, b, c := q.join(k), q.join(k), q.join(k)
	q.released(k)
	if got := [3]string{woken(a), woken(b), woken(c)}; got != [3]string{wokenHandover, "", ""} {
		t.Fatalf("after a release: woken %q, want the head by handover", got)
	}
	q.leave(k, b, false)
	if got := [2]string{woken(a), woken(c)}; got != [2]string{"", ""} {
		t.Fatalf("a waiter behind the head left: woken %q, want nobody", got)
	}
	q.leave(k, a, false)
	if !q.head(k, c) || woken(c) != wokenQueue {
		t.Fatal("the head left: the next waiter is not the head, or was not woken")
	}
	d := q.join(k)
	q.leave(k, c, true)
	if !q.head(k, d) || woken(d) != "" {
		t.Fatal("the head left with the key: the next waiter is not the head, or was woken before the key's release")
	}
	q.leave(k, d, false)
	if len(q.queues) != 0 || len(q.byHash) != 0 || q.notified(KeyHash("b", "k")) {
		t.Fatalf("the last waiter left: queues %v, by hash %v remain", q.queues, q.byHash)
	}
}

// The head polls slowly only while the listener has been subscribed since
// its last attempt (the epoch it saw then); otherwise fast. Waiters behind
// the head poll at slowPoll. Every change of the listener wakes every head.
func TestQueuePollFollowsTheListener(t *testing.T) {
	const fast, slow = 40 * time.Millisecond, 10 * time.Second
	in := func(d, p time.Duration) bool { return d >= p/2 && d <= p/2+p }
	var q keyQueues
	k1, k2 := [2]string{"b", "one"}, [2]string{"b", "two"}
	h1, behind := q.join(k1), q.join(k1)
	h2 := q.join(k2)

	_, e0 := q.listenState()
	if d := q.poll(k1, h1, e0, fast, slow); !in(d, fast) {
		t.Fatalf("no listener: the head polls after %s, want about %s", d, fast)
	}
	if d := q.poll(k1, behind, e0, fast, slow); d != slowPoll {
		t.Fatalf("behind the head: polls after %s, want %s", d, slowPoll)
	}

	q.setListening(true)
	if got := [3]string{woken(h1), woken(behind), woken(h2)}; got != [3]string{wokenListener, "", wokenListener} {
		t.Fatalf("listener up: woken %q, want both heads by listener", got)
	}
	up, e1 := q.listenState()
	if !up || e1 == e0 {
		t.Fatalf("listener up: state %v, epoch %d (was %d)", up, e1, e0)
	}
	if d := q.poll(k1, h1, e1, fast, slow); !in(d, slow) {
		t.Fatalf("listening since the last attempt: the head polls after %s, want about %s", d, slow)
	}
	if d := q.poll(k1, h1, e0, fast, slow); !in(d, fast) {
		t.Fatalf("the last attempt was before the listener subscribed: the head polls after %s, want about %s", d, fast)
	}

	q.setListening(false)
	if got := [2]string{woken(h1), woken(h2)}; got != [2]string{wokenListener, wokenListener} {
		t.Fatalf("listener lost: woken %q, want both heads by listener", got)
	}
	_, e2 := q.listenState()
	if d := q.poll(k1, h1, e2, fast, slow); !in(d, fast) {
		t.Fatalf("listener down: the head polls after %s, want about %s", d, fast)
	}
	// Lost and regained between two attempts: a release in the gap went
	// unheard, so the head polls fast until its next attempt.
	q.setListening(true)
	q.setListening(false)
	q.setListening(true)
	if d := q.poll(k1, h1, e2, fast, slow); !in(d, fast) {
		t.Fatalf("listener regained since the last attempt: the head polls after %s, want about %s", d, fast)
	}
}
