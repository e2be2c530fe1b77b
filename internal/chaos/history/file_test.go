package history

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestFileRoundTrip checks that a history read back is the history written,
// every field included, one JSON object a line.
func TestFileRoundTrip(t *testing.T) {
	ops := history(
		put(1, "a", 1, 0, 1).answered(`"e-a"`).detail("200"),
		put(2, "b", 0, 2, 3).when(IfMatch, "a").ends(PreconditionFailed).detail("412 PreconditionFailed"),
		put(3, "c", 7, 2, 3).when(IfNoneMatch, "").settled("adopted: gen 7"),
		del(9, 0, 4, 5).direct(),
		get(4, "", 6, 7),
	)
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := WriteFile(path, ops); err != nil {
		t.Fatal(err)
	}
	back, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, ops) {
		t.Fatalf("read back\n%+v\nwant\n%+v", back, ops)
	}
	raw, _ := os.ReadFile(path)
	if lines := strings.Count(string(raw), "\n"); lines != len(ops) {
		t.Fatalf("%d lines for %d ops", lines, len(ops))
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}

	if err := os.WriteFile(path, append(raw, "{not json\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(path); err == nil || len(got) != len(ops) || !strings.Contains(err.Error(), "op 6") {
		t.Fatalf("a damaged line: %d ops, err %v", len(got), err)
	}
}

// TestSummary checks the counts a campaign report shows.
func TestSummary(t *testing.T) {
	ops := history(
		put(1, "a", 1, 0, 1),
		put(2, "b", 2, 2, 3).on("b/2"),
		put(1, "x", 0, 4, 5).ends(Unknown),
		put(1, "y", 3, 4, 5).settled("adopted"),
		put(1, "z", 0, 4, 5).ends(Failed).settled("not found"),
		put(2, "w", 0, 4, 5).ends(Failed).settled("not found"),
		del(9, 0, 6, 7).direct(),
		get(3, "a", 8, 9),
		get(3, "", 8, 9),
	)
	ops[1].Gateway = 2
	ops[7].Gateway = Balancer
	s := Summary(ops)
	for _, want := range []string{
		"9 ops on 2 keys by 4 clients",
		"by kind: write 6, read 2, delete 1",
		"write ok 3",
		"write failed 2",
		"read absent 1",
		"by route: gateway 0 6, balancer 1, direct 1, gateway 2 1",
		"2  not found -> failed",
		"1  adopted -> ok",
		"1  unsettled",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}
