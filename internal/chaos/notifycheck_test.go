package chaos

import (
	"strings"
	"testing"
)

// The notification check has teeth: fed a history with an event lost, one
// delivered that was never committed (or committed for another target's
// bucket), one of a key's events after a later one, or a wrong eventName, it
// reports a violation; duplicates and events committed after the cut-off
// (still on their way) are counted, not violations, and so is an event
// acknowledged before arriving again after a later one of its key (a stale
// resend), but not one that was only tried before.
func TestCheckNotifications(t *testing.T) {
	committed := []committedEvent{
		{ID: 10, Bucket: "chaos-a", Key: "k0", Gen: 1, Op: "put"},
		{ID: 11, Bucket: "chaos-a", Key: "k0", Gen: 2, Deleted: true},
		{ID: 12, Bucket: "chaos-a", Key: "k1", Gen: 3, Op: "copy"},
		{ID: 13, Bucket: "chaos-a", Key: "k0", Gen: 4},            // found at the store: no attempt
		{ID: 14, Bucket: "chaos-a", Key: "k1", Gen: 5, Op: "put"}, // after the cut-off
	}
	ev := func(id, key string, gen int64, name string, acked bool) receivedEvent {
		return receivedEvent{ID: id, Bucket: "chaos-a", Key: key, Gen: gen, Name: name, Acked: acked}
	}
	good := []receivedEvent{
		ev("10", "k0", 1, "ObjectCreated:Put", false), // a 500, then the resend
		ev("10", "k0", 1, "ObjectCreated:Put", true),
		ev("12", "k1", 3, "ObjectCreated:Copy", true),
		ev("11", "k0", 2, "ObjectRemoved:Delete", true),
		ev("13", "k0", 4, "ObjectCreated:Put", true),
		ev("13", "k0", 4, "ObjectCreated:Put", true),
	}
	for _, tc := range []struct {
		name  string
		got   []receivedEvent
		want  string // in a violation; "" for none
		check func(NotifyCheck) bool
	}{
		{"all delivered, duplicates counted", good, "", func(n NotifyCheck) bool {
			return n.Duplicates == 2 && n.Delivered == 4 && n.Committed == 4 && n.Missing == 0
		}},
		{"one lost", append(append([]receivedEvent(nil), good[:2]...), good[3:]...), "committed event 12 (chaos-a/k1 generation 3) never acknowledged", func(n NotifyCheck) bool { return n.Missing == 1 }},
		{"received but never acknowledged", append([]receivedEvent{ev("12", "k1", 3, "ObjectCreated:Copy", false)}, append(append([]receivedEvent(nil), good[:2]...), good[3:]...)...), "never acknowledged (received 1 times)", nil},
		{"never committed", append(append([]receivedEvent(nil), good...), ev("99", "k2", 7, "ObjectCreated:Put", true)), "received event 99", func(n NotifyCheck) bool { return n.Uncommitted == 1 }},
		{"another bucket's event", append(append([]receivedEvent(nil), good...), receivedEvent{ID: "12", Bucket: "chaos-c", Key: "k1", Gen: 3, Name: "ObjectCreated:Copy", Acked: true}), "never committed for this target", nil},
		{"a generation the event does not have", append(append([]receivedEvent(nil), good...), ev("13", "k0", 5, "ObjectCreated:Put", true)), "received event 13", nil},
		{"out of order", []receivedEvent{good[1], good[2], good[4], good[3]}, "chaos-a/k0: generation 2 (event 11) received after generation 4 (event 13)", func(n NotifyCheck) bool { return n.OutOfOrder == 1 }},
		{"a stale resend of an event acknowledged before", append(append([]receivedEvent(nil), good...), ev("11", "k0", 2, "ObjectRemoved:Delete", false)), "", func(n NotifyCheck) bool {
			return n.StaleResends == 1 && n.OutOfOrder == 0 && n.Duplicates == 3
		}},
		{"a late first arrival after a resend of an unacknowledged try", []receivedEvent{good[0], ev("11", "k0", 2, "ObjectRemoved:Delete", false), good[2], good[4], good[3]}, "generation 2 (event 11) received after generation 4", nil},
		{"wrong name", []receivedEvent{ev("10", "k0", 1, "ObjectCreated:Copy", true), good[2], good[3], good[4]}, "named ObjectCreated:Copy, want ObjectCreated:Put", nil},
		{"a delete named as a write", []receivedEvent{good[1], good[2], ev("11", "k0", 2, "ObjectCreated:Put", true), good[4]}, "want ObjectRemoved:Delete", nil},
		{"later events may still be on their way", append(append([]receivedEvent(nil), good...), ev("14", "k1", 5, "ObjectCreated:Put", true)), "", func(n NotifyCheck) bool { return n.Delivered == 5 }},
	} {
		res, problems := checkNotifications("hook", "webhook", committed, 13, tc.got)
		joined := strings.Join(problems, "\n")
		switch {
		case tc.want == "" && len(problems) > 0:
			t.Errorf("%s: violations %s", tc.name, joined)
		case tc.want != "" && !strings.Contains(joined, tc.want):
			t.Errorf("%s: violations %q, want one with %q", tc.name, joined, tc.want)
		}
		if tc.check != nil && !tc.check(res) {
			t.Errorf("%s: counts %s", tc.name, res)
		}
	}
}
