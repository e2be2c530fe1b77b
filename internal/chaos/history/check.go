package history

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Verdicts of a check, porcupine's.
const (
	Ok      = porcupine.Ok      // linearizable
	Illegal = porcupine.Illegal // not linearizable
	Timeout = porcupine.Unknown // the time budget ran out first
)

// KeyResult is the check of one key's register.
type KeyResult struct {
	Key      string
	Ops      int // operations checked
	Unknown  int // of those, open-ended: outcome Unknown, or settled after the client gave up
	Bounded  int // of those, ones whose effect has a deadline all the same (see effectDeadlines)
	Excluded int // kept in the history, nothing to check: Failed ops, reads without an answer, Unknown ops that cannot have taken effect (see prepare)
	Merged   int // repeated acknowledgements of one generation folded into one operation (see coalesce)
	Verdict  porcupine.CheckResult
	Elapsed  time.Duration
	Failure  string // for an Illegal key: where the longest linearization found stops, and the ops around it
	Relaxed  bool   // Illegal already by the relaxed check (see relaxed.go)

	ops      []porcupine.Operation // for the exact check
	relaxed  []porcupine.Operation // for the relaxed check, nil if it is the exact one
	phantoms []phantom
	unplaced []porcupine.Operation // the exact check's ops that are phantoms in the relaxed one

	// porcupine's linearization data, of the check that found the key
	// Illegal or of Visualize's
	info      porcupine.LinearizationInfo
	infoOps   []porcupine.Operation
	infoModel porcupine.Model
	hasInfo   bool
}

// Result is the check of a whole history.
type Result struct {
	Verdict   porcupine.CheckResult // Ok only if every key is Ok
	Keys      []KeyResult           // by key
	Failure   string                // the first Illegal key's description, "" if none
	Malformed []string              // operations Check could not interpret: excluded, and the result is not Ok
	Elapsed   time.Duration

	timeout time.Duration // Check's, for Visualize's own check
}

// Ok reports whether every key was found linearizable and every operation
// could be read.
func (r *Result) Ok() bool { return r.Verdict == Ok && len(r.Malformed) == 0 }

// Check checks that the operations on every key are linearizable against
// the register model (see step), one porcupine check per key, so that a
// violation names its key and a slow key does not hide the others' results.
// timeout bounds the whole check (0: no bound); keys not finished in time
// are Timeout, which says nothing either way.
//
// Failed operations and reads without an answer are excluded: a Failed
// operation had no effect, and an unanswered read observed nothing.
// Open-ended operations (outcome Unknown, or Settled) may take effect any
// time after Invoke, since a write held in a gateway or the network outlives
// the client's timeout: they get a Return after every other operation of
// their key unless the history itself bounds their effect
// (effectDeadlines), and an Unknown one may also never take effect (see
// step).
//
// A key with Unknown ops left without a deadline is first checked in a
// relaxed way that refutes violations quickly (see relaxed.go). Only the
// cost of the search depends on how many such ops are left: a synthetic
// 300k-op campaign over 24 keys with dozens of them per key is checked in
// seconds on two cores, valid or with a planted violation (see
// TestSyntheticCampaign).
func Check(ops []Op, timeout time.Duration) Result {
	start := time.Now()
	var deadline time.Time
	if timeout > 0 {
		deadline = start.Add(timeout)
	}
	res := Result{Verdict: Ok, timeout: timeout}

	own := slices.Clone(ops) // the checker keeps pointers into it
	byKey := map[string][]*Op{}
	for i := range own {
		op := &own[i]
		if why := malformed(op); why != "" {
			res.Malformed = append(res.Malformed, fmt.Sprintf("%s: %s", origin(op), why))
			continue
		}
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	for key, kops := range byKey {
		res.Keys = append(res.Keys, prepare(key, kops))
	}
	slices.SortFunc(res.Keys, func(a, b KeyResult) int { return strings.Compare(a.Key, b.Key) })

	// The biggest keys first, on as many workers as there are CPUs:
	// porcupine's search is single-threaded per key.
	order := make([]int, len(res.Keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(res.Keys[b].Ops, res.Keys[a].Ops) })
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(len(order), 1)) {
		wg.Go(func() {
			for i := range work {
				checkKey(&res.Keys[i], deadline)
			}
		})
	}
	for _, i := range order {
		work <- i
	}
	close(work)
	wg.Wait()

	for i := range res.Keys {
		k := &res.Keys[i]
		switch {
		case k.Verdict == Illegal:
			if res.Verdict != Illegal {
				res.Failure = k.Failure
			}
			res.Verdict = Illegal
		case k.Verdict == Timeout && res.Verdict == Ok:
			res.Verdict = Timeout
		}
	}
	res.Elapsed = time.Since(start)
	return res
}

// malformed says why an operation cannot be checked, "" if it can.
func malformed(op *Op) string {
	switch op.Kind {
	case Read, Write, Delete:
	default:
		return fmt.Sprintf("unknown kind %q", op.Kind)
	}
	switch op.Outcome {
	case OK, Absent, PreconditionFailed, Failed, Unknown:
	default:
		return fmt.Sprintf("unknown outcome %q", op.Outcome)
	}
	switch op.Cond {
	case NoCond, IfMatch, IfNoneMatch:
	default:
		return fmt.Sprintf("unknown condition %q", op.Cond)
	}
	if op.Key == "" {
		return "no key"
	}
	// Only an answer's time bounds anything; the others are left out or
	// open-ended.
	answered := op.Outcome != Failed && op.Outcome != Unknown && op.Settled == ""
	if answered && op.Return < op.Invoke {
		return "returned before it was invoked"
	}
	return ""
}

// prepare turns one key's operations into porcupine's, in invocation order.
func prepare(key string, ops []*Op) KeyResult {
	k := KeyResult{Key: key}
	// An Unknown op whose If-Match names a value no other op of the key
	// may have written never took effect: its condition never held (the
	// campaign's clients often send If-Match on a value another client has
	// already replaced). Left in, it would be one more op porcupine tries
	// at every step of its search.
	writers := map[string]int{}
	for _, op := range ops {
		if op.Kind == Write && (op.Outcome == OK || op.Outcome == Unknown) {
			writers[op.Value]++
		}
	}
	var kept []*Op
	for _, op := range ops {
		switch {
		case op.Outcome == Failed, op.Kind == Read && op.Outcome == Unknown:
		case op.Outcome == Unknown && op.Cond == IfMatch &&
			writers[op.CondValue]-btoi(op.Kind == Write && op.Value == op.CondValue) == 0:
		default:
			kept = append(kept, op)
			continue
		}
		k.Excluded++
	}
	kept, k.Merged = coalesce(kept)
	slices.SortFunc(kept, func(a, b *Op) int {
		return cmp.Or(cmp.Compare(a.Invoke, b.Invoke), cmp.Compare(a.ID, b.ID))
	})

	deadline, openEnd := effectDeadlines(kept)

	// Porcupine's visualization draws one lane per ClientId. Clients get
	// theirs; an open-ended op overlaps its client's later ops, so it gets a
	// lane of its own.
	lanes := map[int]int{}
	var clients []int
	for _, op := range kept {
		if _, ok := lanes[op.Client]; !ok {
			lanes[op.Client] = 0
			clients = append(clients, op.Client)
		}
	}
	slices.Sort(clients)
	for i, c := range clients {
		lanes[c] = i
	}
	extra := len(clients)

	k.ops = make([]porcupine.Operation, len(kept), len(kept)+1)
	needEnd := false
	for i, op := range kept {
		p := porcupine.Operation{ClientId: lanes[op.Client], Input: op, Call: op.Invoke, Return: op.Return, Metadata: op}
		if op.openEnded() {
			k.Unknown++
			p.Return = deadline[op]
			if p.Return < openEnd {
				k.Bounded++
			} else {
				needEnd = needEnd || op.Outcome == Unknown
			}
			p.ClientId = extra
			extra++
		}
		k.ops[i] = p
	}
	k.Ops = len(k.ops)
	if !needEnd {
		return k
	}
	// After every answer, before the open ends: see step.
	e := endOp(key)
	k.ops = append(k.ops, porcupine.Operation{ClientId: extra, Input: e, Call: openEnd - 1, Return: openEnd - 1, Metadata: e})

	// The relaxed check: the same ops but the Unknown ones with no
	// deadline, which become phantoms.
	var unplaced []*Op
	for _, p := range k.ops[:k.Ops] {
		op := p.Input.(*Op)
		if op.Outcome == Unknown && p.Return == openEnd {
			unplaced = append(unplaced, op)
			k.unplaced = append(k.unplaced, p)
			continue
		}
		p.Input = &relaxedOp{op, p.Return}
		k.relaxed = append(k.relaxed, p)
	}
	k.phantoms = phantoms(unplaced, kept)
	return k
}

// effectDeadlines gives every open-ended op of one key the latest moment
// its effect can have taken place. That is openEnd, after every invocation
// and answer of the key and after the end op, unless the rest of the
// history bounds it sooner:
//
//   - a write whose value some op observed (a read returning it, or a write
//     or delete whose If-Match on it succeeded), when no other write of the
//     key could have written that value: its effect came before the first
//     such observer answered;
//   - an op settled with a generation: its effect came before any
//     acknowledged op with a higher generation answered, since the model
//     orders them by generation anyway.
//
// Either bound keeps every linearization the open end allows, but without
// it an open-ended op is concurrent with everything after it, and porcupine's
// search, which backtracks in time order, explores the combinations of all
// such ops over the whole rest of the history: a few dozen of them in a
// 12,000-op key took minutes instead of a fraction of a second.
func effectDeadlines(ops []*Op) (deadline map[*Op]int64, openEnd int64) {
	var horizon int64
	writers := map[string]int{} // ops that may have written each value
	observed := map[string]int64{}
	observe := func(v string, at int64) {
		if t, ok := observed[v]; !ok || at < t {
			observed[v] = at
		}
	}
	type ack struct{ gen, ret int64 }
	var acks []ack
	for _, op := range ops {
		horizon = max(horizon, op.Invoke, op.Return)
		if op.Kind == Write && (op.Outcome == OK || op.Outcome == Unknown) {
			writers[op.Value]++
		}
		if op.openEnded() || op.Outcome != OK {
			continue
		}
		if op.Kind == Read {
			observe(op.Value, op.Return)
		} else if op.Cond == IfMatch {
			observe(op.CondValue, op.Return)
		}
		if op.Acknowledged() {
			acks = append(acks, ack{op.Gen, op.Return})
		}
	}
	// The earliest answer among the acknowledgements of a higher
	// generation: a suffix minimum over the acknowledgements by generation.
	slices.SortFunc(acks, func(a, b ack) int { return cmp.Compare(a.gen, b.gen) })
	for i := len(acks) - 2; i >= 0; i-- {
		acks[i].ret = min(acks[i].ret, acks[i+1].ret)
	}

	openEnd = horizon + 2
	deadline = map[*Op]int64{}
	for _, op := range ops {
		if !op.openEnded() {
			continue
		}
		d := openEnd
		if t, ok := observed[op.Value]; ok && op.Kind == Write && writers[op.Value] == 1 {
			d = min(d, t)
		}
		if op.Acknowledged() {
			i, _ := slices.BinarySearchFunc(acks, op.Gen+1, func(a ack, g int64) int { return cmp.Compare(a.gen, g) })
			if i < len(acks) {
				d = min(d, acks[i].ret)
			}
		}
		// Observed before it was invoked: the closed interval
		// [Invoke, Invoke] lets porcupine find the violation.
		deadline[op] = max(d, op.Invoke)
	}
	return deadline, openEnd
}

// coalesce folds acknowledgements of one effect into one operation: two
// acknowledged writes of a key with the same generation and value.
// fencegate answers a CompleteMultipartUpload retried after a lost answer
// with the first try's result and generation without sending it again
// (DESIGN.md, "Repeated Complete"), so both tries report the one effect. It
// took place after the first invocation and before the first answer, which
// is the merged operation's interval. Ops with the same generation that
// differ, and deletes, are left alone, and the model rejects the second.
func coalesce(ops []*Op) ([]*Op, int) {
	type effect struct {
		gen   int64
		value string
	}
	groups := map[effect][]*Op{}
	for _, op := range ops {
		if op.Acknowledged() && op.Kind == Write {
			e := effect{op.Gen, op.Value}
			groups[e] = append(groups[e], op)
		}
	}
	merged := 0
	drop := map[*Op]*Op{}
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		// The representative: an op whose answer its client saw, if any,
		// with the earliest answer.
		rep := g[0]
		for _, op := range g[1:] {
			if (rep.openEnded() && !op.openEnded()) || (rep.openEnded() == op.openEnded() && op.Return < rep.Return) {
				rep = op
			}
		}
		m := *rep
		ids := make([]string, 0, len(g))
		for _, op := range g {
			m.Invoke = min(m.Invoke, op.Invoke)
			ids = append(ids, fmt.Sprint(op.ID))
			drop[op] = &m
		}
		m.Detail = strings.TrimSpace(m.Detail + " (one effect answered to ops " + strings.Join(ids, ", ") + ")")
		merged += len(g) - 1
	}
	if merged == 0 {
		return ops, 0
	}
	out := ops[:0:0]
	seen := map[*Op]bool{}
	for _, op := range ops {
		if m, ok := drop[op]; ok {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
			continue
		}
		out = append(out, op)
	}
	return out, merged
}

// checkKey runs porcupine on one key within the deadline: first the
// relaxed check if the key has Unknown ops with no deadline (see
// relaxed.go), which refutes quickly, then the exact check.
//
// Neither keeps linearization data: porcupine's verbose mode records the
// longest linearization at every backtrack, which made checking a synthetic
// 300k-op campaign several times slower. Only an Illegal key is checked
// again, verbosely, for its description; Visualize does the same on demand.
func checkKey(k *KeyResult, deadline time.Time) {
	start := time.Now()
	defer func() { k.Elapsed = time.Since(start) }()
	budget, ok := remaining(deadline)
	if !ok {
		k.Verdict = Timeout
		k.Failure = fmt.Sprintf("key %s: not checked, the time budget was spent", k.Key)
		return
	}
	if k.relaxed != nil {
		if porcupine.CheckOperationsTimeout(newRelaxedModel(k.phantoms), k.relaxed, budget) == Illegal {
			k.Relaxed = true
		} else if budget, ok = remaining(deadline); !ok {
			k.Verdict = Timeout
			return
		}
	}
	if k.Relaxed {
		k.Verdict = Illegal
	} else {
		k.Verdict = porcupine.CheckOperationsTimeout(newModel(), k.ops, budget)
	}
	if k.Verdict != Illegal {
		return
	}
	k.Failure = headline(k)
	if budget, ok = remaining(deadline); ok && k.verbose(k.Relaxed, budget) == Illegal {
		k.Failure = explain(k)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// remaining is the time left until deadline, 0 (no limit) for no deadline;
// false when it has passed.
func remaining(deadline time.Time) (time.Duration, bool) {
	if deadline.IsZero() {
		return 0, true
	}
	left := time.Until(deadline)
	return left, left > 0
}

// verbose checks the key again, keeping porcupine's linearization data for
// explain and the visualization.
func (k *KeyResult) verbose(relaxed bool, budget time.Duration) porcupine.CheckResult {
	model, ops := newModel(), k.ops
	if relaxed {
		model, ops = newRelaxedModel(k.phantoms), k.relaxed
	}
	v, info := porcupine.CheckOperationsVerbose(model, ops, budget)
	if relaxed {
		// The phantoms are no ops of this check: show them as notes.
		notes := make([]porcupine.Annotation, len(k.unplaced))
		for i, p := range k.unplaced {
			op := p.Input.(*Op)
			notes[i] = porcupine.Annotation{
				ClientId: p.ClientId, Start: op.Invoke, End: op.Return,
				Description: describe(op),
				Details:     origin(op) + "; no deadline, so in this check an effect that may take place any number of times after the invocation",
			}
		}
		info.AddAnnotations(notes)
	}
	k.info, k.infoOps, k.infoModel, k.hasInfo = info, ops, model, true
	return v
}

// opOf is the campaign's op behind a porcupine op of either check.
func opOf(input any) *Op {
	if r, ok := input.(*relaxedOp); ok {
		return r.op
	}
	return input.(*Op)
}

// headline is the first line of an Illegal key's failure.
func headline(k *KeyResult) string {
	even := ""
	if k.Relaxed {
		even = ", even if its Unknown ops took effect any number of times"
	}
	return fmt.Sprintf("key %s: not linearizable%s (%d ops checked, %d open-ended)", k.Key, even, k.Ops, k.Unknown)
}

// explain describes where an illegal key's history stops being
// linearizable: the longest linearization porcupine found, its last steps,
// and the operations that could come next, none of which can.
func explain(k *KeyResult) string {
	var b strings.Builder
	b.WriteString(headline(k))
	parts := k.info.PartialLinearizations()
	if len(parts) == 0 || len(parts[0]) == 0 {
		return b.String()
	}
	var longest []int
	for _, p := range parts[0] {
		if len(p) > len(longest) {
			longest = p
		}
	}
	m, ops := k.infoModel, k.infoOps
	state := m.Init()
	described := make([]string, len(longest))
	done := make([]bool, len(ops))
	for i, id := range longest {
		_, state = m.Step(state, ops[id].Input, nil)
		described[i] = m.DescribeState(state)
		done[id] = true
	}
	fmt.Fprintf(&b, "\n  the longest linearization found takes %d ops, to state %s; its last steps:", len(longest), m.DescribeState(state))
	for i := max(0, len(longest)-3); i < len(longest); i++ {
		op := opOf(ops[longest[i]].Input)
		fmt.Fprintf(&b, "\n    %s  => %s  [%s]", describe(op), described[i], origin(op))
	}
	// The op that must take effect next: the earliest answer not yet
	// linearized. Every op invoked by then could go first; none can.
	first := -1
	for i, p := range ops {
		if !done[i] && (first < 0 || p.Return < ops[first].Return) {
			first = i
		}
	}
	if first < 0 {
		return b.String()
	}
	by := ops[first].Return
	fmt.Fprintf(&b, "\n  then nothing can follow: op %d answered at %s; the ops that could take effect by then:",
		opOf(ops[first].Input).ID, ms(by))
	shown := 0
	for i, p := range ops {
		if done[i] || p.Call > by {
			continue
		}
		if shown == 8 {
			b.WriteString("\n    ...")
			break
		}
		shown++
		verdict := "illegal here"
		if legal, _ := m.Step(state, p.Input, nil); legal {
			verdict = "legal here, but nothing linearizable follows"
		}
		op := opOf(p.Input)
		fmt.Fprintf(&b, "\n    %s  (%s)  [%s]", describe(op), verdict, origin(op))
	}
	return b.String()
}

// String reports the check: the verdict, each key's, the first failure and
// any operation that could not be read.
func (r *Result) String() string {
	var b strings.Builder
	ops, unknown, excluded := 0, 0, 0
	for _, k := range r.Keys {
		ops += k.Ops
		unknown += k.Unknown
		excluded += k.Excluded
	}
	fmt.Fprintf(&b, "linearizability: %s: %d keys, %d ops checked (%d open-ended), %d excluded, in %s\n",
		r.Verdict, len(r.Keys), ops, unknown, excluded, r.Elapsed.Round(time.Millisecond))
	for _, k := range r.Keys {
		fmt.Fprintf(&b, "  %s: %s, %d ops (%d open-ended, %d of them bounded, %d excluded", k.Key, k.Verdict, k.Ops, k.Unknown, k.Bounded, k.Excluded)
		if k.Merged > 0 {
			fmt.Fprintf(&b, ", %d repeated acks folded", k.Merged)
		}
		fmt.Fprintf(&b, ") in %s\n", k.Elapsed.Round(time.Millisecond))
	}
	if r.Failure != "" {
		b.WriteString(r.Failure)
		b.WriteString("\n")
	}
	if len(r.Malformed) > 0 {
		fmt.Fprintf(&b, "%d malformed ops, not checked:\n", len(r.Malformed))
		for i, m := range r.Malformed {
			if i == 10 {
				b.WriteString("  ...\n")
				break
			}
			fmt.Fprintf(&b, "  %s\n", m)
		}
	}
	return b.String()
}

// Visualize writes porcupine's HTML visualization of the key that matters:
// the first Illegal key, else the first that timed out, else the first key.
// One key, because a whole campaign is too large to read in a browser and
// porcupine's view of a violation is per key anyway; VisualizeKey writes any
// other.
func (r *Result) Visualize(path string) error {
	for _, want := range []porcupine.CheckResult{Illegal, Timeout, Ok} {
		for i := range r.Keys {
			if r.Keys[i].Verdict == want {
				return r.visualize(&r.Keys[i], path)
			}
		}
	}
	return errors.New("history: no key to visualize")
}

// VisualizeKey writes porcupine's HTML visualization of one key's check.
func (r *Result) VisualizeKey(key, path string) error {
	for i := range r.Keys {
		if r.Keys[i].Key == key {
			return r.visualize(&r.Keys[i], path)
		}
	}
	return fmt.Errorf("history: no key %q in the result", key)
}

// visualize writes k's visualization, first checking k again verbosely (in
// Check's time budget) if its linearization data is not kept yet: after a
// timeout the visualization shows the partial linearizations found.
func (r *Result) visualize(k *KeyResult, path string) error {
	if !k.hasInfo {
		k.verbose(false, r.timeout)
	}
	return porcupine.VisualizePath(k.infoModel, k.info, path)
}
