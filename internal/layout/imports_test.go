// Package layout holds tests about the module's shape: which package may
// import which. The rule is the allowed-imports table in docs/DESIGN.md; this
// test reads it from there, so the document and the check cannot drift.
package layout

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rule is one row of the table.
type rule struct {
	pkg string // module-relative: "gateway", "internal/stack"
	// testsOnly: the package has test files only (its "may import" cell says so).
	testsOnly bool
	mayImport []string // module-relative packages
	testsMay  []string // module-relative packages its tests may import besides
	notImport []string // import patterns it must not import directly
	notDepend []string // import patterns it must not depend on at any depth
}

// pkg is what `go list -json` says of one package.
type pkg struct {
	ImportPath   string
	Imports      []string
	Deps         []string
	GoFiles      []string
	TestImports  []string
	XTestImports []string
}

const tableHeading = "## Packages and what each may import"

// parseTable reads the allowed-imports table: the first Markdown table after
// tableHeading, with the columns package | may import | its tests may also
// import | must not import | must not depend on. Names are in backquotes;
// anything else in a cell (a dash, words) is ignored, except "tests only".
func parseTable(r io.Reader) (map[string]rule, error) {
	sc := bufio.NewScanner(r)
	inSection, inTable := false, false
	rules := map[string]rule{}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "## "):
			if inTable {
				return rules, nil
			}
			inSection = line == tableHeading
			continue
		case !inSection:
			continue
		case !strings.HasPrefix(line, "|"):
			if inTable {
				return rules, nil
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if !inTable {
			inTable = true
			if len(cells) != 5 || !strings.Contains(cells[0], "package") {
				return nil, fmt.Errorf("the table's header is %q, want 5 columns starting with package", line)
			}
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		if len(cells) != 5 {
			return nil, fmt.Errorf("row %q: want 5 cells", line)
		}
		names := codeSpans(cells[0])
		if len(names) != 1 {
			return nil, fmt.Errorf("row %q: the package cell names %d packages", line, len(names))
		}
		ru := rule{pkg: names[0], testsOnly: strings.Contains(cells[1], "tests only"),
			mayImport: codeSpans(cells[1]), testsMay: codeSpans(cells[2]),
			notImport: codeSpans(cells[3]), notDepend: codeSpans(cells[4])}
		if _, dup := rules[ru.pkg]; dup {
			return nil, fmt.Errorf("package %s has two rows", ru.pkg)
		}
		rules[ru.pkg] = ru
	}
	if !inTable {
		return nil, fmt.Errorf("no table under %q", tableHeading)
	}
	return rules, sc.Err()
}

// codeSpans returns the `quoted` names of a cell.
func codeSpans(cell string) []string {
	var out []string
	parts := strings.Split(cell, "`")
	for i := 1; i < len(parts); i += 2 {
		if s := strings.TrimSpace(parts[i]); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// matches reports whether path is pattern, or under it when pattern ends in
// "/..." (as go list patterns do). A pattern is tried both as a full import
// path ("github.com/jackc/pgx/v5/...", "database/sql") and relative to the
// module ("gateway/..."): a module path always starts with the module's, so
// the two readings cannot both match one path.
func matches(pattern, path, module string) bool {
	for _, p := range []string{pattern, module + "/" + pattern} {
		if base, ok := strings.CutSuffix(p, "/..."); ok {
			if path == base || strings.HasPrefix(path, base+"/") {
				return true
			}
		} else if path == p {
			return true
		}
	}
	return false
}

// check returns every way the packages break the rules.
func check(module string, rules map[string]rule, pkgs []pkg) []string {
	var bad []string
	rel := func(p string) (string, bool) {
		if p == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(p, module+"/")
		return r, ok
	}
	for _, p := range pkgs {
		name, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		ru, ok := rules[name]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s has no row in docs/DESIGN.md's allowed-imports table: add one", name))
			continue
		}
		if ru.testsOnly && len(p.GoFiles) > 0 {
			bad = append(bad, fmt.Sprintf("%s is tests only, but has non-test files %v", name, p.GoFiles))
		}
		for _, imp := range p.Imports {
			if r, own := rel(imp); own && !slices.Contains(ru.mayImport, r) {
				bad = append(bad, fmt.Sprintf("%s imports %s, which the table does not allow", name, r))
			}
			for _, pat := range ru.notImport {
				if matches(pat, imp, module) {
					bad = append(bad, fmt.Sprintf("%s imports %s (the table forbids %s)", name, imp, pat))
				}
			}
		}
		for _, pat := range ru.notDepend {
			for _, dep := range p.Deps { // the first one found says enough
				if matches(pat, dep, module) {
					bad = append(bad, fmt.Sprintf("%s depends on %s (the table forbids %s at any depth)", name, dep, pat))
					break
				}
			}
		}
		for _, imp := range append(slices.Clone(p.TestImports), p.XTestImports...) {
			r, own := rel(imp)
			if !own || r == name || slices.Contains(ru.mayImport, r) || slices.Contains(ru.testsMay, r) {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s's tests import %s, which the table does not allow", name, r))
		}
	}
	// Nothing imports a command, not even a test.
	for _, p := range pkgs {
		for _, imp := range append(append(slices.Clone(p.Imports), p.TestImports...), p.XTestImports...) {
			if r, own := rel(imp); own && strings.HasPrefix(r, "cmd/") {
				bad = append(bad, fmt.Sprintf("%s imports the command %s", p.ImportPath, r))
			}
		}
	}
	return bad
}

func goList(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

// TestImportsFollowDesign checks every package of the module against the
// allowed-imports table in docs/DESIGN.md.
func TestImportsFollowDesign(t *testing.T) {
	modInfo := strings.Fields(string(goList(t, "list", "-m", "-f", "{{.Path}} {{.Dir}}")))
	if len(modInfo) != 2 {
		t.Fatalf("go list -m: %q", modInfo)
	}
	module, root := modInfo[0], modInfo[1]
	f, err := os.Open(filepath.Join(root, "docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rules, err := parseTable(f)
	if err != nil {
		t.Fatalf("docs/DESIGN.md: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(goList(t, "list", "-json", module+"/..."))))
	var pkgs []pkg
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < len(rules)-1 {
		t.Fatalf("go list found %d packages, the table has %d rows", len(pkgs), len(rules))
	}
	for _, b := range check(module, rules, pkgs) {
		t.Error(b)
	}
}

// TestCheckCatchesForbiddenImports: the check itself fails on each kind of
// broken rule.
func TestCheckCatchesForbiddenImports(t *testing.T) {
	const m = "example.com/m"
	rules := map[string]rule{
		"sigv4":   {pkg: "sigv4", notDepend: []string{"github.com/valyala/fasthttp/..."}},
		"gateway": {pkg: "gateway", mayImport: []string{"sigv4"}, notImport: []string{"github.com/jackc/pgx/v5/..."}},
		"conf":    {pkg: "conf", testsOnly: true, testsMay: []string{"gateway"}},
		"future":  {pkg: "future"}, // a row whose package does not exist yet is fine
	}
	ok := []pkg{
		{ImportPath: m + "/sigv4", Deps: []string{"net/http"}},
		{ImportPath: m + "/gateway", Imports: []string{m + "/sigv4", "github.com/valyala/fasthttp"}, Deps: []string{m + "/sigv4"}},
		{ImportPath: m + "/conf", XTestImports: []string{m + "/gateway"}},
	}
	if bad := check(m, rules, ok); len(bad) != 0 {
		t.Fatalf("a clean graph was refused: %v", bad)
	}
	for name, broken := range map[string]pkg{
		"module import not allowed": {ImportPath: m + "/sigv4", Imports: []string{m + "/gateway"}},
		"forbidden direct import":   {ImportPath: m + "/gateway", Imports: []string{"github.com/jackc/pgx/v5/pgxpool"}},
		"forbidden dependency":      {ImportPath: m + "/sigv4", Deps: []string{"github.com/valyala/fasthttp/stackless"}},
		"test import not allowed":   {ImportPath: m + "/gateway", TestImports: []string{m + "/conf"}},
		"no row":                    {ImportPath: m + "/newpkg"},
		"tests only":                {ImportPath: m + "/conf", GoFiles: []string{"x.go"}},
		"imports a command":         {ImportPath: m + "/conf", XTestImports: []string{m + "/cmd/tool"}},
	} {
		if bad := check(m, rules, append(slices.Clone(ok[1:]), broken)); len(bad) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}
