package history

import (
	"fmt"
	"hash/maphash"
	"strings"

	"github.com/anishathalye/porcupine"
)

// State is the register of one key: whether an object exists, its value,
// and a lower bound of its generation. Gen is only a lower bound because a
// write straight at the store, or one whose outcome is unknown, is numbered
// later by the reconciler and that number never reaches the history; an
// acknowledged write must still carry a generation above every generation
// acknowledged before it.
//
// Unseen and Ended only prune porcupine's search (see step): Unseen marks a
// state an Unknown op made that nothing has observed yet, Ended the state
// after every op with an answer.
type State struct {
	Exists bool
	Value  string
	Gen    int64
	Unseen bool
	Ended  bool
}

// String describes the state for the visualization and failure reports.
func (s State) String() string {
	var b strings.Builder
	switch {
	case s.Exists && s.Value == unread:
		b.WriteString("a value no op reads")
	case s.Exists:
		b.WriteString(short(s.Value))
	default:
		b.WriteString("absent")
	}
	fmt.Fprintf(&b, " (gen>=%d", s.Gen)
	if s.Unseen {
		b.WriteString(", by an unknown op, not yet observed")
	}
	if s.Ended {
		b.WriteString(", history ended")
	}
	b.WriteString(")")
	return b.String()
}

// holds reports whether the operation's precondition is true in state s.
func (s State) holds(op *Op) bool {
	switch op.Cond {
	case IfMatch:
		return s.Exists && s.Value == op.CondValue
	case IfNoneMatch:
		return !s.Exists
	default:
		return true
	}
}

// after is the state once op took effect. gen is the generation the effect
// carries, 0 when it is not known; the lower bound never goes down.
func (s State) after(op *Op, gen int64) State {
	n := State{Gen: max(s.Gen, gen), Ended: s.Ended}
	if op.Kind == Write {
		n.Exists, n.Value = true, op.Value
	}
	return n
}

// observes reports whether op's outcome depends on the state it finds: a
// read, a condition (a 412 has one), or an answer that there is nothing.
func observes(op *Op) bool {
	return op.Kind == Read || op.Cond != NoCond || op.Outcome == Absent
}

// end is the kind of the op Check adds at the end of a key's history, after
// every op with an answer and before the open end of the Unknown ops, so
// that "never took effect" is one place in the linearization: after it.
const end Kind = "end"

// endOp is key's end op.
func endOp(key string) *Op { return &Op{ID: -1, Client: -1, Key: key, Kind: end, Outcome: OK} }

// step is the register's sequential specification: whether op may take
// effect in state s, and the state after it. Every op reaching it is valid
// (see malformed) and has a definite effect or none, except Unknown ones.
//
// An Unknown op may have taken effect at any point after its invocation, or
// never. "Never" is its placement after the end op, as a no-op. Before the
// end op it is placed only where it changes the state and something
// observes that change before it is overwritten: a placement with no
// visible effect (a false condition, a delete of nothing) or whose effect
// is overwritten unseen is interchangeable with "never" (every other op
// sees the same states), and porcupine, which cannot tell such placements
// apart, would otherwise explore them all in every combination. (An Unknown
// op given a deadline before the end op was observed, so its effect is
// seen in every linearization: see effectDeadlines.)
func step(s State, op *Op) (bool, State) {
	if op.Kind == end {
		s.Ended, s.Unseen = true, false
		return true, s
	}
	if op.Outcome == Unknown {
		if s.Ended {
			return true, s
		}
		if !s.holds(op) || op.Before > 0 && s.Gen >= op.Before {
			// The condition is false, or a generation after the attempt
			// closed past its horizon is already in place: no effect here.
			return false, s
		}
		n := s.after(op, 0)
		if n.Exists == s.Exists && n.Value == s.Value {
			return false, s
		}
		if s.Unseen && !observes(op) {
			return false, s
		}
		n.Unseen = true
		return true, n
	}
	if s.Unseen && !observes(op) {
		// It would overwrite an unknown op's effect unseen.
		return false, s
	}
	s.Unseen = false
	switch op.Outcome {
	case PreconditionFailed:
		// A 412 is definite: the condition was false and nothing changed.
		return op.Cond != NoCond && !s.holds(op), s
	case Absent:
		// The store answered that there is no object (a read's 404, or a
		// conditional write's or delete's NoSuchKey): nothing changed.
		return !s.Exists, s
	case OK:
		if !s.holds(op) {
			return false, s
		}
		switch op.Kind {
		case Read:
			return s.Exists && s.Value == op.Value, s
		case Write, Delete:
			if op.Gen > 0 {
				// Generations come from a sequence, strictly increasing
				// per key: an acknowledged generation must exceed every
				// generation acknowledged before it.
				return op.Gen > s.Gen, s.after(op, op.Gen)
			}
			// Straight at the store (or no generation answered): legal
			// whenever the condition holds; a DELETE of an absent key is
			// a 204 too. The generation comes later; the bound stays.
			return true, s.after(op, 0)
		}
	}
	return false, s
}

var hashSeed = maphash.MakeSeed()

// newModel is the porcupine model of one key's register. Check runs one
// porcupine check per key, for per-key verdicts and a time budget that one
// slow key cannot spend for the others; the Partition functions make the
// model correct on a whole history too.
func newModel() porcupine.Model {
	return porcupine.Model{
		Partition:      partitionByKey,
		PartitionEvent: partitionEventsByKey,
		Init:           func() any { return State{} },
		Step: func(state, input, _ any) (bool, any) {
			s := state.(State)
			ok, n := step(s, input.(*Op))
			if !ok || n == s {
				// The same state: no new allocation for porcupine's
				// many failed and read-only steps.
				return ok, state
			}
			return true, n
		},
		Hash: func(state any) uint64 {
			s := state.(State)
			h := maphash.String(hashSeed, s.Value)
			h ^= uint64(s.Gen) * 0x9e3779b97f4a7c15
			if s.Exists {
				h ^= 1
			}
			if s.Unseen {
				h ^= 2
			}
			if s.Ended {
				h ^= 4
			}
			return h
		},
		Equal: func(a, b any) bool { return a.(State) == b.(State) },
		DescribeOperation: func(input, _ any) string {
			return describe(input.(*Op))
		},
		DescribeState: func(state any) string { return state.(State).String() },
		DescribeOperationMetadata: func(m any) string {
			op, ok := m.(*Op)
			if !ok {
				return ""
			}
			return origin(op)
		},
	}
}

// describe says what an operation did, for the visualization and failure
// reports: "put v=a if-match=b -> ok gen 7".
func describe(op *Op) string {
	if op.Kind == end {
		return "end of the history (unknown ops after it never took effect)"
	}
	var b strings.Builder
	switch op.Kind {
	case Read:
		b.WriteString("get")
	case Write:
		b.WriteString("put v=")
		b.WriteString(short(op.Value))
	case Delete:
		b.WriteString("delete")
	default:
		b.WriteString(string(op.Kind))
	}
	switch op.Cond {
	case NoCond:
	case IfMatch:
		b.WriteString(" if-match=")
		b.WriteString(short(op.CondValue))
	case IfNoneMatch:
		b.WriteString(" if-none-match")
	default:
		b.WriteString(" " + string(op.Cond))
	}
	if op.Direct() {
		b.WriteString(" (direct)")
	}
	b.WriteString(" -> ")
	switch {
	case op.Kind == Read && op.Outcome == OK:
		b.WriteString("v=")
		b.WriteString(short(op.Value))
	case op.Outcome == PreconditionFailed:
		b.WriteString("412")
	default:
		b.WriteString(string(op.Outcome))
	}
	if op.Gen > 0 {
		fmt.Fprintf(&b, " gen %d", op.Gen)
	}
	if op.Settled != "" {
		b.WriteString(" (settled)")
	}
	return b.String()
}

// origin says who made an operation and how it ended: the visualization's
// tooltip and the second half of a report line.
func origin(op *Op) string {
	if op.Kind == end {
		return "added by the checker"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "op %d client %d %s", op.ID, op.Client, op.Route())
	fmt.Fprintf(&b, " [%s, %s]", ms(op.Invoke), ms(op.Return))
	if op.Detail != "" {
		b.WriteString(" ")
		b.WriteString(op.Detail)
	}
	if op.Settled != "" {
		b.WriteString(" settled: ")
		b.WriteString(op.Settled)
	}
	return b.String()
}

// ms formats ns since the campaign start as seconds with ms precision.
func ms(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }

// short keeps values readable in one line.
func short(v string) string {
	if len(v) > 40 {
		return v[:37] + "..."
	}
	return v
}

// partitionByKey splits a history into its keys: registers of different
// keys are independent, so a history is linearizable iff each key's is.
func partitionByKey(h []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var parts [][]porcupine.Operation
	for _, o := range h {
		key := o.Input.(*Op).Key
		i, ok := index[key]
		if !ok {
			i = len(parts)
			index[key] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], o)
	}
	return parts
}

// partitionEventsByKey is partitionByKey for porcupine's event form: a return
// event goes with its call's key.
func partitionEventsByKey(h []porcupine.Event) [][]porcupine.Event {
	index := map[string]int{}
	keyOf := map[int]string{}
	var parts [][]porcupine.Event
	for _, e := range h {
		var key string
		if e.Kind == porcupine.CallEvent {
			key = e.Value.(*Op).Key
			keyOf[e.Id] = key
		} else {
			key = keyOf[e.Id]
		}
		i, ok := index[key]
		if !ok {
			i = len(parts)
			index[key] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], e)
	}
	return parts
}
