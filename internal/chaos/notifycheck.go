package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// committedEvent is one event the notification trigger recorded: an outbox
// row of a bucket whose configuration names the target (docs/NOTIFICATIONS.md:
// the outbox row's id is the event's id).
type committedEvent struct {
	ID          int64
	Bucket, Key string
	Gen         int64
	Deleted     bool
	// Op is the write's attempt's operation ("put", "copy", "complete",
	// ...), "" when the write had no attempt (found at the store) or its
	// attempt was pruned.
	Op string
}

// receivedEvent is one event a target got: a webhook POST (Acked when the
// receiver answered it 2xx in time) or a message in the JetStream stream
// (always Acked).
type receivedEvent struct {
	ID          string
	Bucket, Key string
	Gen         int64
	Name        string
	Acked       bool
}

// NotifyCheck is what the end-of-campaign check found for one target.
type NotifyCheck struct {
	Target      string `json:"target"`
	Kind        string `json:"kind"`
	Committed   int    `json:"committed"`    // events the target had to get
	Received    int    `json:"received"`     // requests or stream messages, duplicates included
	Delivered   int    `json:"delivered"`    // distinct committed events acknowledged
	Duplicates  int    `json:"duplicates"`   // receipts beyond each event's first
	Missing     int    `json:"missing"`      // committed, never acknowledged
	Uncommitted int    `json:"uncommitted"`  // received, never committed (for this target)
	OutOfOrder  int    `json:"out_of_order"` // a key's event first received after a later generation of the key
	// StaleResends: an event acknowledged before, received again after a
	// later generation of its key (a holder stalled past its claim
	// completing an old send, docs/NOTIFICATIONS.md): a duplicate a consumer
	// keeping each key's last sequencer drops, not a break of the order.
	StaleResends int `json:"stale_resends"`
	WrongName    int `json:"wrong_name"`   // eventName not what the write was
	DeadLetters  int `json:"dead_letters"` // left in the dead-letter table
	BadSig       int `json:"bad_signatures,omitempty"`
}

func (n NotifyCheck) String() string {
	return fmt.Sprintf("%s (%s): %d committed, %d received, %d delivered, %d duplicates (%d stale resends), %d missing, %d uncommitted, %d out of order, %d wrong names, %d dead letters",
		n.Target, n.Kind, n.Committed, n.Received, n.Delivered, n.Duplicates, n.StaleResends, n.Missing, n.Uncommitted, n.OutOfOrder, n.WrongName, n.DeadLetters)
}

// eventName is the eventName a committed event must carry (the trigger's
// mapping, meta/migrations/0011_notifications.sql); "ObjectCreated:" alone
// when the write's operation is not known.
func (c committedEvent) eventName() string {
	if c.Deleted {
		return "ObjectRemoved:Delete"
	}
	switch c.Op {
	case "":
		return "ObjectCreated:"
	case "copy":
		return "ObjectCreated:Copy"
	case "complete", "multipart":
		return "ObjectCreated:CompleteMultipartUpload"
	}
	return "ObjectCreated:Put"
}

// checkNotifications holds one target's receipts (in the order they arrived)
// to the committed events: every event with an id up to mustBy acknowledged
// at least once (later ones may still be on their way); nothing received
// that is not a committed event of this target, with its key, generation
// and name; each key's events received in generation order (a resend may
// repeat the last one; an event never arrives for the first time after a
// later one of its key, though one acknowledged before may arrive again late:
// a stale resend). Duplicates are counted, not a violation: delivery is at
// least once. It returns the counts
// and a line per violation (at most a few of each kind, with the count).
func checkNotifications(target, kind string, committed []committedEvent, mustBy int64, got []receivedEvent) (NotifyCheck, []string) {
	res := NotifyCheck{Target: target, Kind: kind, Received: len(got)}
	byID := make(map[string]committedEvent, len(committed))
	for _, c := range committed {
		byID[strconv.FormatInt(c.ID, 10)] = c
		if c.ID <= mustBy {
			res.Committed++
		}
	}
	var problems []string
	examples := map[string]int{}
	report := func(kind, format string, args ...any) {
		if examples[kind]++; examples[kind] <= 5 {
			problems = append(problems, fmt.Sprintf("notifications to %s: ", target)+fmt.Sprintf(format, args...))
		}
	}
	seen := map[string]int{}
	acked := map[string]bool{}
	last := map[string]receivedEvent{}
	arrivals := map[string][]string{}
	for _, e := range got {
		key := e.Bucket + "/" + e.Key
		arrivals[key] = append(arrivals[key], fmt.Sprintf("%d#%s", e.Gen, e.ID))
		c, ok := byID[e.ID]
		if !ok || c.Bucket != e.Bucket || c.Key != e.Key || c.Gen != e.Gen {
			res.Uncommitted++
			report("uncommitted", "received event %s (%s generation %d, %s) that was never committed for this target", e.ID, key, e.Gen, e.Name)
			continue
		}
		if want := c.eventName(); e.Name != want && !(strings.HasSuffix(want, ":") && strings.HasPrefix(e.Name, want)) {
			res.WrongName++
			report("name", "event %s (%s generation %d) named %s, want %s", e.ID, key, e.Gen, e.Name, want)
		}
		if l, ok := last[key]; ok && e.Gen < l.Gen && acked[e.ID] {
			res.StaleResends++
		} else if ok && e.Gen < l.Gen {
			res.OutOfOrder++
			report("order", "%s: generation %d (event %s) received after generation %d (event %s); the key's arrivals so far: %s",
				key, e.Gen, e.ID, l.Gen, l.ID, tail(arrivals[key], 12))
		}
		if l, ok := last[key]; !ok || e.Gen >= l.Gen {
			last[key] = e
		}
		seen[e.ID]++
		if e.Acked {
			acked[e.ID] = true
		}
	}
	for _, n := range seen {
		res.Duplicates += n - 1
	}
	var missing []committedEvent
	for _, c := range committed {
		id := strconv.FormatInt(c.ID, 10)
		if acked[id] {
			res.Delivered++
		} else if c.ID <= mustBy {
			missing = append(missing, c)
		}
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i].ID < missing[j].ID })
	res.Missing = len(missing)
	for _, c := range missing {
		report("missing", "committed event %d (%s/%s generation %d) never acknowledged (received %d times)", c.ID, c.Bucket, c.Key, c.Gen, seen[strconv.FormatInt(c.ID, 10)])
	}
	for kind, n := range examples {
		if n > 5 {
			problems = append(problems, fmt.Sprintf("notifications to %s: ... %d more %s", target, n-5, kind))
		}
	}
	return res, problems
}

func tail(s []string, n int) string {
	if len(s) > n {
		return "... " + strings.Join(s[len(s)-n:], " ")
	}
	return strings.Join(s, " ")
}
