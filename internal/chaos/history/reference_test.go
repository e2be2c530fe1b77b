package history

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// reference checks one key's history the plain way, straight from the
// model's definition: no end op, no pruning of unseen or invisible
// placements, no effect deadlines, no ops left out beyond Failed ones and
// unanswered reads. It is exponential in the open-ended ops, so only for
// small histories, where it says what Check must say.
func reference(ops []Op) porcupine.CheckResult {
	var horizon int64
	for _, op := range ops {
		horizon = max(horizon, op.Invoke, op.Return)
	}
	var hist []porcupine.Operation
	for i := range ops {
		op := &ops[i]
		if op.Outcome == Failed || op.Kind == Read && op.Outcome == Unknown {
			continue
		}
		ret := op.Return
		if op.Kind != Read && (op.Outcome == Unknown || op.Settled != "") {
			ret = horizon + 1
		}
		hist = append(hist, porcupine.Operation{Input: op, Call: op.Invoke, Return: ret})
	}
	type reg struct {
		exists bool
		value  string
		gen    int64
	}
	holds := func(s reg, op *Op) bool {
		switch op.Cond {
		case IfMatch:
			return s.exists && s.value == op.CondValue
		case IfNoneMatch:
			return !s.exists
		}
		return true
	}
	apply := func(s reg, op *Op) reg {
		if op.Kind == Delete {
			return reg{gen: max(s.gen, op.Gen)}
		}
		return reg{true, op.Value, max(s.gen, op.Gen)}
	}
	model := porcupine.Model{
		Init: func() any { return reg{} },
		Step: func(state, input, _ any) (bool, any) {
			s, op := state.(reg), input.(*Op)
			switch {
			case op.Outcome == Unknown:
				if holds(s, op) {
					return true, apply(s, op)
				}
				return true, s
			case op.Outcome == PreconditionFailed:
				return op.Cond != NoCond && !holds(s, op), s
			case op.Outcome == Absent:
				return !s.exists, s
			case op.Kind == Read:
				return holds(s, op) && s.exists && s.value == op.Value, s
			case !holds(s, op):
				return false, s
			case op.Gen > 0 && op.Gen <= s.gen:
				return false, s
			}
			return true, apply(s, op)
		},
	}
	return porcupine.CheckOperationsTimeout(model, hist, 0)
}

// TestAgainstReference checks Check's verdict against reference on many
// small random histories, valid ones and ones with one op altered: the
// pruning Check does for speed (the end op, unseen effects, effect
// deadlines, Unknown If-Match ops that cannot hold, the relaxed check) must
// never change a verdict.
func TestAgainstReference(t *testing.T) {
	n := 1500
	if testing.Short() {
		n = 300
	}
	if v, err := strconv.Atoi(os.Getenv("FENCEGATE_HISTORY_CASES")); err == nil && v > 0 {
		n = v // a longer hunt
	}
	maxOps := 14
	if v, err := strconv.Atoi(os.Getenv("FENCEGATE_HISTORY_CASE_OPS")); err == nil && v > 0 {
		maxOps = v
	}
	rng := rand.New(rand.NewPCG(7, 7))
	verdicts := map[string]int{}
	for i := range n {
		ops, _ := synthesize(synth{Keys: 1, OpsPerKey: 8 + rng.IntN(maxOps), ClientsPerKey: 2 + rng.IntN(3), Unknown: 0.25, Seed: uint64(i)})
		how := "valid"
		if i%3 != 0 {
			how = alter(rng, ops)
		}
		want := reference(ops)
		got := Check(ops, time.Minute)
		if want == Timeout || got.Verdict == Timeout {
			t.Fatalf("case %d: a timeout", i)
		}
		verdicts[fmt.Sprintf("%s: %s", how, want)]++
		for _, k := range got.Keys {
			if k.Relaxed {
				verdicts["found by the relaxed check"]++
			}
		}
		if got.Verdict != want {
			var b strings.Builder
			for _, op := range ops {
				fmt.Fprintf(&b, "  %s  [%s] effect by %s\n", describe(&op), origin(&op), ms(op.Return))
			}
			t.Fatalf("case %d (%s): Check says %s, the reference %s:\n%s%s", i, how, got.Verdict, want, b.String(), got.String())
		}
	}
	t.Logf("verdicts: %v", verdicts)
}

// alter changes one op of a valid history the way a faulty gateway might
// and says how.
func alter(rng *rand.Rand, ops []Op) string {
	var values []string
	var gens []int64
	for _, op := range ops {
		if op.Kind == Write {
			values = append(values, op.Value)
		}
		if op.Gen > 0 {
			gens = append(gens, op.Gen)
		}
	}
	for range 100 {
		op := &ops[rng.IntN(len(ops))]
		switch rng.IntN(5) {
		case 0:
			if op.Kind == Read && len(values) > 0 {
				op.Outcome, op.Value = OK, values[rng.IntN(len(values))]
				return "read another value"
			}
		case 1:
			if op.Kind == Read && op.Outcome == OK {
				op.Outcome, op.Value = Absent, ""
				return "read absent"
			}
		case 2:
			if op.Outcome == PreconditionFailed {
				op.Outcome, op.Gen = OK, 0
				if len(gens) > 0 {
					op.Gen = gens[rng.IntN(len(gens))] + int64(rng.IntN(2))
				}
				return "412 turned into success"
			}
			if op.Outcome == OK && op.Cond != NoCond {
				op.Outcome, op.Gen = PreconditionFailed, 0
				return "success turned into 412"
			}
		case 3:
			if op.Acknowledged() && len(gens) > 0 {
				op.Gen = gens[rng.IntN(len(gens))] + int64(rng.IntN(3)) - 1
				op.Gen = max(op.Gen, 1)
				return "another generation"
			}
		case 4:
			if op.Outcome == Unknown && op.Kind != Read {
				op.Outcome, op.Gen = OK, 0
				if len(gens) > 0 && rng.IntN(2) == 0 {
					op.Gen = gens[rng.IntN(len(gens))] + 1
				}
				return "unknown turned into success"
			}
		}
	}
	return "unaltered"
}
