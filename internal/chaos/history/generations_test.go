package history

import (
	"strings"
	"testing"
	"time"
)

// TestRealTimeGenerations checks the real-time order of generations: a
// violation is found and names both ops, and what real time allows is not
// reported (overlapping ops in any order, open-ended ops as the earlier
// one, repeated answers of one effect).
func TestRealTimeGenerations(t *testing.T) {
	decreasing := history(
		put(1, "a", 2, 0, 1),
		put(2, "b", 1, 2, 3),
	)
	v := RealTimeGenerations(decreasing)
	if len(v) != 1 || !strings.Contains(v[0], "key b/k: generation 1 after 2") ||
		!strings.Contains(v[0], "op 2 client 2") || !strings.Contains(v[0], "op 1 client 1") {
		t.Fatalf("decreasing generations: %q", v)
	}
	if r := Check(decreasing, 10*time.Second); r.Verdict != Illegal {
		t.Fatalf("Check of decreasing generations:\n%s", r.String())
	}

	equal := history(put(1, "a", 3, 0, 1), del(2, 3, 2, 3))
	if v := RealTimeGenerations(equal); len(v) != 1 {
		t.Fatalf("a generation reused in real time: %q", v)
	}

	// The running maximum: the violation is against the highest generation
	// returned before, not the last.
	v = RealTimeGenerations(history(
		put(1, "a", 5, 0, 1),
		put(2, "b", 6, 2, 3),
		put(3, "c", 4, 0, 4),   // overlaps a and b: not bound by them
		put(1, "d", 7, 5, 6),   // fine
		put(2, "e", 5, 10, 11), // after 7 returned
		put(9, "z", 0, 12, 13).direct(),
		get(3, "e", 14, 15),
	))
	if len(v) != 1 || !strings.Contains(v[0], "generation 5 after 7") {
		t.Fatalf("running maximum: %q", v)
	}

	allowed := history(
		put(1, "a", 2, 0, 10),
		put(2, "b", 1, 1, 9), // overlapping: either order
		put(3, "x", 9, 11, 12).settled("adopted"),
		put(1, "c", 3, 13, 14),                     // x never answered its client: no bound
		put(1, "m", 10, 15, 16).settled("adopted"), // its answer was lost
		put(2, "n", 11, 17, 18),
		put(1, "m", 10, 22, 23), // the retry, answered with the first try's generation
		put(3, "d", 12, 30, 31).on("b/other"),
		put(3, "e", 1, 32, 33).on("b/third"), // other keys, other sequences
	)
	if v := RealTimeGenerations(allowed); len(v) != 0 {
		t.Fatalf("allowed orders reported: %q", v)
	}

	var many []Op
	many = append(many, put(1, "top", 1000, 0, 1))
	for i := range 30 {
		many = append(many, put(2, "v", int64(i+1), int64(10+2*i), int64(11+2*i)))
	}
	if v := RealTimeGenerations(number(many)); len(v) != maxLinesPerKey+1 || !strings.Contains(v[maxLinesPerKey], "10 more") {
		t.Fatalf("capped report: %d lines, last %q", len(v), v[len(v)-1])
	}
}

// TestLostAcks checks that an acknowledged generation missing from the
// catalog's history, or recorded as something else, is reported, and that
// a matching history (quotes aside) is not.
func TestLostAcks(t *testing.T) {
	ops := history(
		put(1, "a", 1, 0, 1).answered(`"e-a"`),
		put(2, "b", 2, 2, 3), // no ETag answered: only the generation is compared
		del(1, 3, 4, 5),
		put(9, "d", 0, 6, 7).direct(),
		put(1, "x", 0, 8, 9).ends(Unknown),
		put(1, "y", 0, 8, 9).ends(Failed),
		put(2, "m", 5, 10, 11).answered("e-m").settled("adopted"),
		get(3, "m", 12, 13),
	)
	full := map[string][]Generation{"b/k": {
		{Gen: 1, ETag: "e-a", Origin: "fencegate"},
		{Gen: 2, ETag: `"e-b"`, Origin: "fencegate"},
		{Gen: 3, Deleted: true, Origin: "fencegate"},
		{Gen: 4, ETag: `"e-d"`, Origin: "external"},
		{Gen: 5, ETag: `"e-m"`, Origin: "adopted"},
	}}
	if v := LostAcks(ops, full); len(v) != 0 {
		t.Fatalf("complete history: %q", v)
	}

	lost := map[string][]Generation{"b/k": {full["b/k"][0], full["b/k"][2], full["b/k"][3], full["b/k"][4]}}
	if v := LostAcks(ops, lost); len(v) != 1 || !strings.Contains(v[0], "key b/k: generation 2 acknowledged but not in the key's history") {
		t.Fatalf("lost generation 2: %q", v)
	}
	if v := LostAcks(ops, nil); len(v) != 4 {
		t.Fatalf("no history at all: want 4 lost acks, got %q", v)
	}

	wrong := map[string][]Generation{"b/k": {
		{Gen: 1, ETag: `"e-other"`},
		{Gen: 2, Deleted: true},
		{Gen: 3, ETag: `"e-c"`},
		{Gen: 5, ETag: `"e-m"`},
	}}
	v := LostAcks(ops, wrong)
	if len(v) != 3 {
		t.Fatalf("want 3 mismatches, got %q", v)
	}
	for i, want := range []string{`with etag "e-other", not "e-a"`, "as a delete", "as a write"} {
		if !strings.Contains(v[i], want) {
			t.Errorf("mismatch %d: want %q in %q", i, want, v[i])
		}
	}
}
