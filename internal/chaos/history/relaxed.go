package history

import (
	"cmp"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The relaxed check refutes quickly what the exact check refutes slowly.
//
// In the exact check every Unknown op with no deadline (see
// effectDeadlines) is an operation of its own that porcupine may place, or
// not, anywhere after its invocation. Finding a linearization of a valid
// history stays fast, but proving that none exists means trying every
// combination of their placements before the violation: with a few dozen
// of them in a 12,000-op key, a planted stale read was not refuted in a
// minute. The relaxed check lets those ops take effect any number of times
// instead of at most once: they become phantoms, effects that may happen
// just before any operation answered after the phantom's invocation,
// folded into that operation's step, so porcupine has nothing to place and
// its search is the search of a history without them. Every exact
// linearization is a relaxed one, so a history the relaxed check finds
// illegal is illegal; one it finds linearizable still gets the exact
// check.

// phantom is an effect an unplaced Unknown op may have, from its
// invocation on.
type phantom struct {
	op     Op // Value replaced by unread when no op reads it
	invoke int64
}

// unread stands for every written value no op of the key ever reads or
// names in an If-Match: no op can tell such values apart, so phantoms that
// write them are one.
const unread = "\x00unread"

// relaxedOp is an operation of the relaxed check: its phantoms may take
// effect before it if invoked by its Return.
type relaxedOp struct {
	op  *Op
	ret int64
}

// states is a set of register states, sorted: the relaxed model's state,
// every state the register may be in.
type states []State

func compareState(a, b State) int {
	if a.Exists != b.Exists {
		if a.Exists {
			return 1
		}
		return -1
	}
	return cmp.Or(strings.Compare(a.Value, b.Value), cmp.Compare(a.Gen, b.Gen))
}

func (ss states) String() string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.String()
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "one of " + strings.Join(parts, " | ")
}

// phantoms gathers the phantom effects of a key's unplaced Unknown ops:
// one per distinct effect, from its earliest invocation.
func phantoms(unplaced []*Op, all []*Op) []phantom {
	named := map[string]bool{}
	for _, op := range all {
		if op.Kind == Read {
			named[op.Value] = true
		}
		if op.Cond == IfMatch {
			named[op.CondValue] = true
		}
	}
	first := map[Op]int64{}
	for _, op := range unplaced {
		e := Op{Kind: op.Kind, Cond: op.Cond, CondValue: op.CondValue, Outcome: Unknown}
		if op.Kind == Write {
			e.Value = op.Value
			if !named[op.Value] {
				e.Value = unread
			}
		}
		if t, ok := first[e]; !ok || op.Invoke < t {
			first[e] = op.Invoke
		}
	}
	var ps []phantom
	for e, t := range first {
		ps = append(ps, phantom{e, t})
	}
	slices.SortFunc(ps, func(a, b phantom) int {
		return cmp.Or(cmp.Compare(a.invoke, b.invoke), strings.Compare(describe(&a.op), describe(&b.op)))
	})
	return ps
}

// closure is every state s can become through phantoms invoked by ret.
func closure(s State, ps []phantom, ret int64) states {
	out := states{s}
	for i := 0; i < len(out); i++ {
		t := out[i]
		for j := range ps {
			p := &ps[j]
			if p.invoke > ret {
				break
			}
			if !t.holds(&p.op) {
				continue
			}
			if n := t.after(&p.op, 0); !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// plainStep is step without the exact check's pruning: an Unknown op with a
// deadline takes effect where it is placed if its condition holds, and is a
// no-op if not. It allows at least what step allows.
func plainStep(s State, op *Op) (bool, State) {
	if op.Outcome == Unknown {
		if s.holds(op) && (op.Before == 0 || s.Gen < op.Before) {
			return true, s.after(op, 0)
		}
		return true, s
	}
	return step(s, op)
}

// newRelaxedModel is the porcupine model of the relaxed check, over sets
// of states: each step takes every state of the set, every phantom effect
// that can precede the op, and keeps every state the op can leave.
func newRelaxedModel(ps []phantom) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return states{{}} },
		Step: func(state, input, _ any) (bool, any) {
			in := input.(*relaxedOp)
			var out states
			for _, s := range state.(states) {
				for _, t := range closure(s, ps, in.ret) {
					if ok, n := plainStep(t, in.op); ok && !slices.Contains(out, n) {
						out = append(out, n)
					}
				}
			}
			slices.SortFunc(out, compareState)
			return len(out) > 0, out
		},
		Equal: func(a, b any) bool { return slices.Equal(a.(states), b.(states)) },
		Hash: func(state any) uint64 {
			var h maphash.Hash
			h.SetSeed(hashSeed)
			for _, s := range state.(states) {
				h.WriteString(s.Value)
				maphash.WriteComparable(&h, s.Gen)
				maphash.WriteComparable(&h, s.Exists)
			}
			return h.Sum64()
		},
		DescribeOperation: func(input, _ any) string { return describe(input.(*relaxedOp).op) },
		DescribeState:     func(state any) string { return state.(states).String() },
		DescribeOperationMetadata: func(m any) string {
			if op, ok := m.(*Op); ok {
				return origin(op)
			}
			return ""
		},
	}
}
