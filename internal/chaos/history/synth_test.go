package history

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// synth describes a synthetic campaign: a register per key driven by
// concurrent clients, with every operation taking effect at a random point
// inside its interval, so the history is linearizable by construction.
type synth struct {
	Keys, OpsPerKey, ClientsPerKey int
	Unknown                        float64 // share of gateway writes and deletes whose answer is lost
	Seed                           uint64
}

// synthOp is an op being generated, with the moment its effect takes place
// (lin) and whether it takes place at all.
type synthOp struct {
	op     Op
	lin    int64
	effect bool
	settle bool // settle its unknown outcome afterwards, as a campaign does
}

// synthesize generates the campaign's history and the catalog's generation
// history that goes with it.
//
// Per key, clients run one op at a time: reads 45%, gateway writes 35% (15%
// of them If-Match on a recent value, 10% If-None-Match), gateway deletes 8%
// (10% If-Match), writes and deletes straight at the store 12%. 1% of gateway
// writes fail with no effect; s.Unknown of gateway writes and deletes lose
// their answer (the client gives up after 10 ms): half take effect, as late
// as 30 ms after their invocation, half never; half of each are settled
// afterwards (to OK with their generation, or to Failed). Some reads lose
// their answer too. Effects are applied in the order of their moments,
// which decides what reads see, which conditions hold, and the generations.
func synthesize(s synth) ([]Op, map[string][]Generation) {
	const ms = int64(time.Millisecond)
	var ops []Op
	hist := map[string][]Generation{}
	for k := range s.Keys {
		key := fmt.Sprintf("chaos/key-%02d", k)
		rng := rand.New(rand.NewPCG(s.Seed, uint64(k)))
		cursor := make([]int64, s.ClientsPerKey)
		for c := range cursor {
			cursor[c] = rng.Int64N(ms)
		}
		var written []string // values in the order generated, for If-Match
		recent := func() string {
			if len(written) == 0 {
				return "none"
			}
			return written[max(0, len(written)-1-rng.IntN(3))]
		}
		gen := make([]synthOp, 0, s.OpsPerKey)
		for n := range s.OpsPerKey {
			c := 0
			for i := range cursor {
				if cursor[i] < cursor[c] {
					c = i
				}
			}
			inv := cursor[c] + rng.Int64N(ms/5)
			dur := ms/5 + rng.Int64N(3*ms)
			if rng.IntN(50) == 0 {
				dur += 20 * ms // a slow one, overlapping many others
			}
			o := synthOp{op: Op{Client: k*s.ClientsPerKey + c, Key: key, Invoke: inv, Return: inv + dur}, effect: true}
			o.lin = inv + rng.Int64N(dur+1)
			o.op.Gateway = rng.IntN(3)
			value := fmt.Sprintf("%s/c%d/%d", key, c, n)
			switch r := rng.IntN(100); {
			case r < 45:
				o.op.Kind = Read
				if rng.IntN(200) == 0 {
					o.op.Outcome, o.op.Value, o.effect = Unknown, "lost", false
				}
			case r < 80:
				o.op.Kind, o.op.Value = Write, value
				written = append(written, value)
				switch rng.IntN(20) {
				case 0, 1, 2:
					o.op.Cond, o.op.CondValue = IfMatch, recent()
				case 3, 4:
					o.op.Cond = IfNoneMatch
				}
			case r < 88:
				o.op.Kind = Delete
				if rng.IntN(10) == 0 {
					o.op.Cond, o.op.CondValue = IfMatch, recent()
				}
			case r < 96:
				o.op.Kind, o.op.Value, o.op.Gateway = Write, value, -1
				written = append(written, value)
			default:
				o.op.Kind, o.op.Gateway = Delete, -1
			}
			if o.op.Kind != Read && o.op.Gateway >= 0 {
				switch {
				case rng.Float64() < s.Unknown:
					o.op.Outcome = Unknown
					o.op.Return = inv + 10*ms
					o.effect = rng.IntN(2) == 0
					o.lin = inv + rng.Int64N(30*ms)
					o.settle = rng.IntN(2) == 0
					o.op.Detail = "synth: lost answer, no effect"
					if o.effect {
						o.op.Detail = fmt.Sprintf("synth: lost answer, effect at %.3fs", float64(o.lin)/1e9)
					}
				case o.op.Kind == Write && rng.IntN(100) == 0:
					o.op.Outcome, o.effect = Failed, false
				}
			}
			cursor[c] = o.op.Return
			gen = append(gen, o)
		}

		// Apply the effects in the order they take place.
		order := make([]*synthOp, len(gen))
		for i := range gen {
			order[i] = &gen[i]
		}
		slices.SortStableFunc(order, func(a, b *synthOp) int { return cmp.Compare(a.lin, b.lin) })
		var st State
		var seq int64
		for _, o := range order {
			op := &o.op
			if !o.effect {
				if op.Outcome == Unknown && o.settle {
					op.Outcome, op.Settled = Failed, "not found"
				}
				continue
			}
			if !st.holds(op) {
				if op.Outcome != Unknown {
					op.Outcome = PreconditionFailed
				}
				continue
			}
			if op.Kind == Read {
				if st.Exists {
					op.Outcome, op.Value = OK, st.Value
				} else {
					op.Outcome = Absent
				}
				continue
			}
			// Every effect gets the next generations, the reconciler
			// numbering writes straight at the store and lost answers.
			seq += 1 + rng.Int64N(2)
			g := Generation{Gen: seq, Deleted: op.Kind == Delete, Origin: "fencegate"}
			if op.Kind == Write {
				g.ETag = strconv.Quote("etag-" + op.Value)
			}
			switch {
			case op.Gateway < 0:
				op.Outcome, g.Origin = OK, "external"
			case op.Outcome == Unknown:
				g.Origin = "adopted"
				if o.settle {
					op.Outcome, op.Gen, op.Settled = OK, seq, "adopted"
				}
			default:
				op.Outcome, op.Gen = OK, seq
			}
			if op.Kind == Write && op.Outcome == OK {
				op.ETag = g.ETag
			}
			hist[key] = append(hist[key], g)
			st = st.after(op, seq)
		}
		for _, o := range gen {
			ops = append(ops, o.op)
		}
	}
	slices.SortStableFunc(ops, func(a, b Op) int { return cmp.Compare(a.Invoke, b.Invoke) })
	return numberFrom(ops, 1), hist
}

// TestSyntheticCampaign checks a synthetic campaign's worth of operations
// (24 keys, 5,000 ops each, 4 clients per key, 1% of gateway writes and
// deletes with a lost answer) and reports how long each check takes: the
// campaign checks 100k-300k ops after its run, so this must stay well under
// a minute. Then it plants one violation of each kind in one key and checks
// that it is found at that scale.
//
// For bigger runs: FENCEGATE_HISTORY_OPS (ops per key),
// FENCEGATE_HISTORY_CLIENTS (clients per key), FENCEGATE_HISTORY_UNKNOWN
// (the share of lost answers), FENCEGATE_HISTORY_SEED.
func TestSyntheticCampaign(t *testing.T) {
	s := synth{Keys: 24, OpsPerKey: 5000, ClientsPerKey: 4, Unknown: 0.01, Seed: 1}
	if testing.Short() {
		s.OpsPerKey = 1000
	}
	if v, err := strconv.Atoi(os.Getenv("FENCEGATE_HISTORY_OPS")); err == nil && v > 0 {
		s.OpsPerKey = v
	}
	if v, err := strconv.Atoi(os.Getenv("FENCEGATE_HISTORY_CLIENTS")); err == nil && v > 0 {
		s.ClientsPerKey = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("FENCEGATE_HISTORY_UNKNOWN"), 64); err == nil && v >= 0 {
		s.Unknown = v
	}
	if v, err := strconv.ParseUint(os.Getenv("FENCEGATE_HISTORY_SEED"), 10, 64); err == nil {
		s.Seed = v
	}
	start := time.Now()
	ops, hist := synthesize(s)
	t.Logf("synthesized in %s: %s", time.Since(start).Round(time.Millisecond), Summary(ops))

	r := Check(ops, time.Minute)
	if !r.Ok() {
		t.Fatalf("a valid history:\n%s", r.String())
	}
	slowest, open, bounded := r.Keys[0], 0, 0
	for _, k := range r.Keys {
		open += k.Unknown
		bounded += k.Bounded
		if k.Elapsed > slowest.Elapsed {
			slowest = k
		}
	}
	t.Logf("Check: %s, %d ops in %s; %d open-ended, %d of them bounded (slowest key %s: %d ops, %d open-ended, %s)",
		r.Verdict, len(ops), r.Elapsed.Round(time.Millisecond), open, bounded,
		slowest.Key, slowest.Ops, slowest.Unknown, slowest.Elapsed.Round(time.Millisecond))

	start = time.Now()
	if v := RealTimeGenerations(ops); len(v) > 0 {
		t.Fatalf("real-time generations: %q", v[:min(len(v), 5)])
	}
	if v := LostAcks(ops, hist); len(v) > 0 {
		t.Fatalf("lost acks: %q", v[:min(len(v), 5)])
	}
	t.Logf("RealTimeGenerations and LostAcks: %s", time.Since(start).Round(time.Millisecond))

	const key, k = "chaos/key-07", 7
	t.Run("stale read", func(t *testing.T) {
		bad := slices.Clone(ops)
		if !plantStaleRead(bad, key) {
			t.Fatal("no place to plant a stale read")
		}
		r := Check(bad, time.Minute)
		if r.Verdict != Illegal || r.Keys[k].Verdict != Illegal || !strings.Contains(r.Failure, key) {
			t.Fatalf("a stale read went unnoticed:\n%s", r.String())
		}
		// The key has Unknown ops with no deadline: the relaxed check
		// refutes it, as the exact one would only much more slowly.
		if !r.Keys[k].Relaxed || !strings.Contains(r.Failure, "any number of times") {
			t.Errorf("not found by the relaxed check:\n%s", r.Failure)
		}
		t.Logf("Check: %s in %s (that key %s)\n%s", r.Verdict, r.Elapsed.Round(time.Millisecond), r.Keys[k].Elapsed.Round(time.Millisecond), r.Failure)
	})
	t.Run("generation going back", func(t *testing.T) {
		bad := slices.Clone(ops)
		if !plantOldGeneration(bad, key) {
			t.Fatal("no place to plant an old generation")
		}
		v := RealTimeGenerations(bad)
		if len(v) == 0 || !strings.Contains(v[0], key) {
			t.Fatalf("RealTimeGenerations: %q", v)
		}
		r := Check(bad, time.Minute)
		if r.Verdict != Illegal || r.Keys[k].Verdict != Illegal {
			t.Fatalf("an old generation went unnoticed:\n%s", r.String())
		}
		t.Logf("Check: %s in %s (that key %s); RealTimeGenerations: %s", r.Verdict, r.Elapsed.Round(time.Millisecond), r.Keys[k].Elapsed.Round(time.Millisecond), v[0])
	})
	t.Run("lost ack", func(t *testing.T) {
		lost := maps.Clone(hist)
		gens := slices.Clone(lost[key])
		i := slices.IndexFunc(gens, func(g Generation) bool { return g.Origin == "fencegate" && g.Gen > gens[len(gens)/2].Gen })
		gens = slices.Delete(gens, i, i+1)
		lost[key] = gens
		v := LostAcks(ops, lost)
		if len(v) != 1 || !strings.Contains(v[0], key) {
			t.Fatalf("LostAcks: %q", v)
		}
		t.Log(v[0])
	})
}

// plantOldGeneration gives an acknowledged write in the middle of key's
// history the generation of one that returned before it was invoked.
func plantOldGeneration(ops []Op, key string) bool {
	var idx []int
	for i := range ops {
		if ops[i].Key == key {
			idx = append(idx, i)
		}
	}
	for _, i := range idx[len(idx)/2:] {
		b := &ops[i]
		if !b.Acknowledged() || b.openEnded() {
			continue
		}
		for _, j := range idx {
			if a := &ops[j]; a.Acknowledged() && !a.openEnded() && a.Return < b.Invoke && a.Gen < b.Gen {
				b.Gen = a.Gen
				return true
			}
		}
	}
	return false
}

// plantStaleRead makes a read in the middle of key's history return the
// value of an acknowledged write older than another acknowledged write that
// returned before the read was invoked: illegal whatever else happened, as
// values are never written twice.
func plantStaleRead(ops []Op, key string) bool {
	var idx []int
	for i := range ops {
		if ops[i].Key == key {
			idx = append(idx, i)
		}
	}
	for _, i := range idx[len(idx)/2:] {
		r := &ops[i]
		if r.Kind != Read || r.Outcome == Unknown {
			continue
		}
		var newer, older *Op
		for _, j := range idx {
			w := &ops[j]
			if w.Kind == Write && w.Acknowledged() && !w.openEnded() && w.Return < r.Invoke && (newer == nil || w.Gen > newer.Gen) {
				newer = w
			}
		}
		for _, j := range idx {
			w := &ops[j]
			if newer != nil && w.Kind == Write && w.Acknowledged() && w.Gen < newer.Gen && w.Value != r.Value {
				older = w
			}
		}
		if older != nil {
			r.Outcome, r.Value = OK, older.Value
			return true
		}
	}
	return false
}
