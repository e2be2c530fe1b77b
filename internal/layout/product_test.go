package layout

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// testHarness is what the product binary must not link: the testing package
// (and its sub-packages) and the module's test-only packages. The failpoints
// are in the tests' build of the gateway only (-tags failpoint).
var testHarness = []string{
	"testing/...",
	"internal/testenv",
	"internal/failpoint",
	"internal/faultproxy",
	"internal/chaos/...",
	"internal/badinput",
}

// harnessIn returns the packages of deps that belong to the test harness.
func harnessIn(module string, deps []string) []string {
	var bad []string
	for _, d := range deps {
		for _, pat := range testHarness {
			if matches(pat, d, module) {
				bad = append(bad, d)
				break
			}
		}
	}
	return bad
}

// TestProductCarriesNoTestHarness: `go list -deps ./cmd/fencegate`, the
// packages linked into the binary `make build` makes, names nothing of the
// test harness. GOFLAGS is cleared so that a test run's own build tags
// (-tags failpoint) do not stand in for the product's build.
func TestProductCarriesNoTestHarness(t *testing.T) {
	module := strings.TrimSpace(string(goList(t, "list", "-m")))
	cmd := exec.Command("go", "list", "-deps", module+"/cmd/fencegate")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/fencegate: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps ./cmd/fencegate listed only %d packages: %q", len(deps), out)
	}
	for _, p := range harnessIn(module, deps) {
		t.Errorf("the fencegate binary links %s, a part of the test harness", p)
	}
}

// TestHarnessCheckCatches: the check refuses each kind of harness package and
// lets the product's own packages and the standard library's internal test
// hooks (internal/testlog, which os imports) through.
func TestHarnessCheckCatches(t *testing.T) {
	const m = "example.com/m"
	clean := []string{"os", "internal/testlog", "internal/synctest", m + "/gateway", m + "/internal/stack", m + "/internal/wiring"}
	if bad := harnessIn(m, clean); len(bad) != 0 {
		t.Fatalf("clean dependencies refused: %v", bad)
	}
	for _, p := range []string{"testing", "testing/iotest", m + "/internal/testenv", m + "/internal/failpoint", m + "/internal/chaos/history"} {
		if bad := harnessIn(m, append(clean[:len(clean):len(clean)], p)); len(bad) != 1 || bad[0] != p {
			t.Errorf("%s: not caught (%v)", p, bad)
		}
	}
}
