package history

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The helpers build one key's operations tersely: times are in ms, and a
// value of "" read means a 404.

func put(client int, v string, gen, inv, ret int64) Op {
	return Op{Client: client, Key: "b/k", Kind: Write, Value: v, Outcome: OK, Gen: gen, Invoke: inv * 1e6, Return: ret * 1e6}
}

func get(client int, v string, inv, ret int64) Op {
	op := Op{Client: client, Key: "b/k", Kind: Read, Value: v, Outcome: OK, Invoke: inv * 1e6, Return: ret * 1e6}
	if v == "" {
		op.Outcome = Absent
	}
	return op
}

func del(client int, gen, inv, ret int64) Op {
	return Op{Client: client, Key: "b/k", Kind: Delete, Outcome: OK, Gen: gen, Invoke: inv * 1e6, Return: ret * 1e6}
}

func (o Op) when(c Cond, v string) Op { o.Cond, o.CondValue = c, v; return o }
func (o Op) ends(out Outcome) Op      { o.Outcome = out; o.Gen = 0; return o }
func (o Op) direct() Op               { o.Gateway, o.Gen = -1, 0; return o }
func (o Op) settled(how string) Op    { o.Settled = how; return o }
func (o Op) on(key string) Op         { o.Key = key; return o }
func (o Op) answered(etag string) Op  { o.ETag = etag; return o }
func (o Op) detail(detail string) Op  { o.Detail = detail; return o }
func (o Op) supersededBy(gen int64) Op {
	o.Outcome, o.Gen, o.Before = Unknown, 0, gen
	return o
}
func history(ops ...Op) []Op { return number(ops) }
func number(ops []Op) []Op   { return numberFrom(ops, 1) }
func numberFrom(ops []Op, id int64) []Op {
	for i := range ops {
		ops[i].ID = id + int64(i)
	}
	return ops
}

// TestValidHistories are histories a correct gateway can produce; each must
// be found linearizable (a checker that is too strict fails here).
func TestValidHistories(t *testing.T) {
	cases := map[string][]Op{
		"a superseded unknown write read before the generation that superseded it": history(
			put(1, "a", 1, 0, 1),
			put(2, "b", 0, 2, 3).supersededBy(3), // landed, then overwritten straight at the store
			get(3, "b", 4, 5),
			put(4, "x", 0, 6, 7).direct(),
			put(1, "c", 3, 8, 9),
			get(3, "c", 10, 11),
		),
		"concurrent writes, reads seeing either order": history(
			put(1, "a", 1, 0, 10),
			put(2, "b", 2, 0, 10),
			get(3, "a", 2, 8), // a, then b, both inside the writes' window
			get(4, "b", 3, 9),
			get(3, "b", 11, 12),
		),
		"concurrent writes numbered against their invocation order": history(
			put(1, "a", 2, 0, 10),
			put(2, "b", 1, 1, 9),
			get(3, "a", 11, 12),
		),
		"unknown write taking effect late": history(
			put(1, "a", 1, 0, 1),
			put(2, "x", 0, 2, 3).ends(Unknown),
			get(3, "a", 4, 5),
			get(3, "x", 10, 11),
			get(1, "x", 12, 13),
		),
		"unknown write never taking effect": history(
			put(1, "a", 1, 0, 1),
			put(2, "x", 0, 2, 3).ends(Unknown),
			get(3, "a", 4, 5),
			get(3, "a", 10, 11),
		),
		"unknown write landing after a later acknowledged write": history(
			put(1, "a", 1, 0, 1),
			put(2, "x", 0, 2, 3).ends(Unknown),
			put(1, "b", 2, 4, 5),
			get(3, "b", 6, 7),
			get(3, "x", 8, 9),
		),
		"unknown write seen only by a 412, then overwritten": history(
			put(1, "a", 1, 0, 1),
			put(2, "x", 0, 2, 3).ends(Unknown),
			put(3, "c", 0, 4, 5).when(IfMatch, "a").ends(PreconditionFailed),
			put(1, "b", 2, 6, 7),
			get(3, "b", 8, 9),
		),
		"unknown delete seen by an absent read, then overwritten": history(
			put(1, "a", 1, 0, 1),
			del(2, 0, 2, 3).ends(Unknown),
			get(3, "", 4, 5),
			put(1, "b", 2, 6, 7),
			get(3, "b", 8, 9),
		),
		"unknown delete seen by a delete answered NoSuchKey": history(
			put(1, "a", 1, 0, 1),
			del(2, 0, 2, 3).ends(Unknown),
			del(3, 0, 4, 5).ends(Absent),
			put(1, "b", 2, 6, 7),
			get(3, "b", 8, 9),
		),
		"unknown write of a value a copy wrote too, landing late": history(
			put(2, "x", 0, 0, 1).ends(Unknown),
			put(1, "x", 1, 2, 3), // a copy of x's source
			get(3, "x", 4, 5),
			put(1, "b", 2, 6, 7),
			get(3, "x", 8, 9),
		),
		"unknown conditional write whose condition turned false": history(
			put(1, "a", 1, 0, 1),
			put(2, "x", 0, 2, 3).when(IfNoneMatch, "").ends(Unknown),
			get(3, "a", 4, 5),
		),
		"settled write landing after its client gave up": history(
			put(2, "x", 2, 0, 1).settled("head: adopted"),
			put(1, "a", 1, 2, 3),
			get(3, "a", 4, 5),
			get(3, "x", 6, 7),
		),
		"conditional writes and 412s": history(
			put(1, "a", 1, 0, 1),
			put(2, "b", 2, 2, 3).when(IfMatch, "a"),
			put(1, "c", 0, 4, 5).when(IfMatch, "a").ends(PreconditionFailed),
			put(3, "d", 0, 6, 7).when(IfNoneMatch, "").ends(PreconditionFailed),
			del(1, 3, 8, 9).when(IfMatch, "b"),
			put(2, "e", 4, 10, 11).when(IfNoneMatch, ""),
			get(3, "e", 12, 13),
		),
		"concurrent conditional writes, one wins": history(
			put(1, "a", 1, 0, 1),
			put(2, "b", 2, 2, 10).when(IfMatch, "a"),
			put(3, "c", 0, 2, 10).when(IfMatch, "a").ends(PreconditionFailed),
			get(1, "b", 11, 12),
		),
		"deletes and absent reads": history(
			get(1, "", 0, 1),
			put(1, "a", 1, 2, 3),
			del(2, 2, 4, 5),
			get(3, "", 6, 7),
			del(1, 0, 8, 9).direct(), // a DELETE of an absent key is a 204 too
			del(2, 3, 10, 11),
			get(3, "", 12, 13),
			get(3, "", 14, 15).ends(Absent),
		),
		"direct writes with no generation, then gateway writes": history(
			put(1, "a", 5, 0, 1),
			put(9, "d", 0, 2, 3).direct(),
			get(2, "d", 4, 5),
			put(9, "e", 0, 6, 7).direct(),
			put(1, "b", 6, 8, 9),
			get(2, "b", 10, 11),
			del(9, 0, 12, 13).direct(),
			get(2, "", 14, 15),
		),
		"failed ops and unanswered reads are excluded": history(
			put(1, "z", 0, 0, 1).ends(Failed),
			get(2, "never-written", 0, 1).ends(Unknown),
			get(3, "", 2, 3),
		),
		"a repeated Complete answered with the first try's generation": history(
			put(1, "m", 3, 0, 1).settled("adopted"),
			put(2, "n", 4, 2, 3),
			put(1, "m", 3, 4, 5), // the retry, answered by fencegate itself
			get(3, "n", 6, 7),
		),
		"ops on other keys are other registers": history(
			put(1, "a", 1, 0, 1),
			put(1, "b", 1, 0, 1).on("b/other"),
			get(2, "a", 2, 3),
			get(2, "", 2, 3).on("b/third"),
		),
	}
	for name, ops := range cases {
		t.Run(name, func(t *testing.T) {
			r := Check(ops, 10*time.Second)
			if !r.Ok() {
				t.Fatalf("want Ok, got:\n%s", r.String())
			}
			if v := RealTimeGenerations(ops); len(v) > 0 {
				t.Fatalf("real-time generations: %q", v)
			}
		})
	}
}

// TestEffectDeadlines checks the deadlines Check gives open-ended ops: the
// first observation of a value only one op wrote, the first answer of a
// higher generation, else the open end. Too early a deadline makes valid
// histories illegal; none makes the search slow.
func TestEffectDeadlines(t *testing.T) {
	ops := history(
		put(1, "a", 1, 0, 1),
		put(2, "x", 0, 2, 3).ends(Unknown),   // read at 9 and 7: by 7
		put(2, "y", 5, 2, 3).settled("adop"), // gen 6 answered at 12, gen 7 at 11: by 11
		put(2, "z", 0, 2, 3).ends(Unknown),   // never observed
		put(2, "w", 0, 2, 3).ends(Unknown),   // w is written by another op too
		put(3, "w", 8, 4, 20),
		get(4, "w", 21, 22),
		put(1, "b", 6, 4, 12),
		put(1, "c", 7, 10, 11).when(IfMatch, "x"),
		get(3, "x", 6, 9),
		get(3, "x", 5, 7),
		del(2, 9, 2, 3).settled("adop"),      // no higher generation: open
		put(2, "v", 0, 30, 31).ends(Unknown), // observed before it was invoked
		get(4, "v", 23, 24),
	)
	var ptrs []*Op
	for i := range ops {
		ptrs = append(ptrs, &ops[i])
	}
	deadline, openEnd := effectDeadlines(ptrs)
	if openEnd != 31e6+2 {
		t.Errorf("open end %d", openEnd)
	}
	for i, want := range map[int]int64{1: 7e6, 2: 11e6, 3: openEnd, 4: openEnd, 11: openEnd, 12: 30e6} {
		if deadline[ptrs[i]] != want {
			t.Errorf("%s: deadline %d, want %d", describe(ptrs[i]), deadline[ptrs[i]], want)
		}
	}
	if len(deadline) != 6 {
		t.Errorf("%d deadlines for 6 open-ended ops", len(deadline))
	}
}

// TestExcludedIfMatch checks that an Unknown op whose If-Match names a
// value no other op wrote is left out (it cannot have taken effect), and
// that one naming a written value is not.
func TestExcludedIfMatch(t *testing.T) {
	ops := history(
		put(1, "a", 1, 0, 1),
		put(2, "x", 0, 2, 3).when(IfMatch, "x").ends(Unknown),
		put(2, "y", 0, 2, 3).when(IfMatch, "never").ends(Unknown),
		put(2, "z", 0, 2, 3).when(IfMatch, "a").ends(Unknown),
		put(2, "q", 0, 2, 3).when(IfMatch, "a").ends(Failed),
		get(3, "z", 4, 5),
	)
	r := Check(ops, 10*time.Second)
	if !r.Ok() || r.Keys[0].Excluded != 3 || r.Keys[0].Ops != 3 {
		t.Fatalf("want 3 ops checked, 3 excluded:\n%s", r.String())
	}
}

// TestIllegalHistories are histories no correct gateway produces; each must
// be found not linearizable, and the failure must name the key.
func TestIllegalHistories(t *testing.T) {
	cases := map[string][]Op{
		"a superseded unknown write read after the generation that superseded it": history(
			put(1, "a", 1, 0, 1),
			put(2, "b", 0, 2, 3).supersededBy(2), // held at the store past the fence
			put(1, "c", 2, 4, 5),
			get(3, "b", 6, 7),
		),
		"stale read after an acknowledged write": history(
			put(1, "a", 1, 0, 1),
			put(2, "b", 2, 2, 3),
			get(3, "a", 4, 5),
		),
		"generations decreasing across real time": history(
			put(1, "a", 2, 0, 1),
			put(2, "b", 1, 2, 3),
		),
		"one generation for two writes": history(
			put(1, "a", 1, 0, 10),
			put(2, "b", 1, 0, 10),
		),
		"if-none-match success while the key exists": history(
			put(1, "a", 1, 0, 1),
			put(2, "b", 2, 2, 3).when(IfNoneMatch, ""),
		),
		"if-match success on another value": history(
			put(1, "a", 1, 0, 1),
			put(2, "b", 2, 2, 3).when(IfMatch, "zz"),
		),
		"412 while the condition was true": history(
			put(1, "a", 1, 0, 1),
			put(2, "b", 0, 2, 3).when(IfMatch, "a").ends(PreconditionFailed),
		),
		"412 with no condition": history(
			put(1, "a", 0, 0, 1).ends(PreconditionFailed),
		),
		"read of a value never written": history(
			put(1, "a", 1, 0, 1),
			get(2, "zz", 2, 3),
		),
		"read of a deleted value": history(
			put(1, "a", 1, 0, 1),
			del(2, 2, 2, 3),
			get(3, "a", 4, 5),
		),
		"absent read after an acknowledged write": history(
			put(1, "a", 1, 0, 1),
			get(2, "", 2, 3),
		),
		"read of an unknown write before it was invoked": history(
			put(1, "a", 1, 0, 1),
			get(2, "x", 2, 3),
			put(3, "x", 0, 4, 5).ends(Unknown),
		),
		"a settled write that was answered is bound by its answer": history(
			put(2, "x", 2, 0, 1),
			put(1, "a", 1, 2, 3),
		),
		"a direct write cannot lower the generation bound": history(
			put(1, "a", 5, 0, 1),
			put(9, "d", 0, 2, 3).direct(),
			put(1, "b", 4, 4, 5),
		),
	}
	for name, ops := range cases {
		t.Run(name, func(t *testing.T) {
			r := Check(ops, 10*time.Second)
			if r.Verdict != Illegal || r.Ok() {
				t.Fatalf("want Illegal, got:\n%s", r.String())
			}
			if !strings.Contains(r.Failure, "key b/k") || !strings.Contains(r.Failure, "ops checked") {
				t.Fatalf("failure does not name the key:\n%s", r.Failure)
			}
		})
	}
}

// TestFailureNamesTheOps checks that the description of a violation shows
// the state reached and the op that cannot follow, and that other keys keep
// their own verdicts.
func TestFailureNamesTheOps(t *testing.T) {
	ops := history(
		put(1, "a", 1, 0, 1),
		put(2, "b", 2, 2, 3),
		get(3, "a", 4, 5).detail("200"),
		put(1, "c", 1, 0, 1).on("b/fine"),
		get(2, "c", 2, 3).on("b/fine"),
	)
	r := Check(ops, 10*time.Second)
	if r.Verdict != Illegal || len(r.Keys) != 2 {
		t.Fatalf("want Illegal on two keys:\n%s", r.String())
	}
	if r.Keys[0].Key != "b/fine" || r.Keys[0].Verdict != Ok || r.Keys[1].Key != "b/k" || r.Keys[1].Verdict != Illegal {
		t.Fatalf("per-key verdicts:\n%s", r.String())
	}
	for _, want := range []string{"key b/k", "3 ops checked", "to state b (gen>=2)", "put v=b -> ok gen 2", "get -> v=a  (illegal here)", "op 3 client 3 gateway 0", "200"} {
		if !strings.Contains(r.Failure, want) {
			t.Errorf("failure lacks %q:\n%s", want, r.Failure)
		}
	}
	if !strings.Contains(r.String(), r.Failure) {
		t.Errorf("String() lacks the failure")
	}
}

// TestCheckBudget checks that a spent time budget gives Timeout, not Ok:
// an unfinished check proves nothing.
func TestCheckBudget(t *testing.T) {
	ops := history(put(1, "a", 1, 0, 1), get(2, "a", 2, 3), get(2, "a", 2, 3).on("b/2"), get(2, "a", 2, 3).on("b/3"))
	r := Check(ops, time.Nanosecond)
	if r.Verdict != Timeout || r.Ok() {
		t.Fatalf("want Timeout:\n%s", r.String())
	}
}

// TestMalformed checks that an op Check cannot read is reported and keeps
// the result from being Ok, instead of being silently dropped.
func TestMalformed(t *testing.T) {
	ops := history(put(1, "a", 1, 0, 1), Op{Key: "b/k", Kind: "list", Outcome: OK}, get(2, "a", 3, 2))
	r := Check(ops, 10*time.Second)
	if r.Ok() || len(r.Malformed) != 2 {
		t.Fatalf("want 2 malformed ops:\n%s", r.String())
	}
	if !strings.Contains(r.String(), `unknown kind "list"`) || !strings.Contains(r.String(), "returned before it was invoked") {
		t.Fatalf("report:\n%s", r.String())
	}
}

// TestVisualize checks that an illegal history's visualization is written,
// with the model's descriptions of ops and states in it.
func TestVisualize(t *testing.T) {
	ops := history(
		put(1, "a", 1, 0, 1),
		put(2, "b", 2, 2, 3).when(IfMatch, "a"),
		put(4, "x", 0, 2, 3).ends(Unknown),
		get(3, "a", 4, 5),
	)
	r := Check(ops, 10*time.Second)
	if r.Verdict != Illegal {
		t.Fatalf("want Illegal:\n%s", r.String())
	}
	path := filepath.Join(t.TempDir(), "viz.html")
	if err := r.Visualize(path); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<html", "put v=b if-match=a", "get", "a (gen>=1)", "op 3 client 4 gateway 0"} {
		if !strings.Contains(string(html), want) && !strings.Contains(string(html), strings.ReplaceAll(want, ">", `\u003e`)) {
			t.Errorf("visualization lacks %q", want)
		}
	}
	if err := r.VisualizeKey("b/none", path); err == nil {
		t.Error("VisualizeKey of a missing key: no error")
	}

	// An Ok key keeps no linearization data from the check: visualizing it
	// checks it again.
	r = Check(history(put(1, "a", 1, 0, 1), put(2, "x", 0, 0, 1).ends(Unknown), get(3, "a", 2, 3)), 10*time.Second)
	if !r.Ok() {
		t.Fatalf("want Ok:\n%s", r.String())
	}
	if err := r.Visualize(path); err != nil {
		t.Fatal(err)
	}
	html, _ = os.ReadFile(path)
	if !strings.Contains(string(html), "end of the history") || !strings.Contains(string(html), "added by the checker") {
		t.Error("the visualization of an Ok key lacks the end op")
	}
}
