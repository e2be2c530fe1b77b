package sysmon

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestEnviron(t *testing.T) {
	for _, c := range []struct {
		name    string
		env     []string
		want    string // GODEBUG afterwards
		changed bool
	}{
		{"none", []string{"A=1"}, Setting, true},
		{"other settings kept", []string{"GODEBUG=gctrace=1", "A=1"}, "gctrace=1," + Setting, true},
		{"operator's own schedtrace wins", []string{"GODEBUG=schedtrace=0"}, "schedtrace=0", false},
		{"among others", []string{"GODEBUG=gctrace=1, schedtrace=5000"}, "gctrace=1, schedtrace=5000", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, changed := Environ(c.env)
			if changed != c.changed {
				t.Fatalf("changed = %v, want %v", changed, c.changed)
			}
			var godebug []string
			for _, kv := range got {
				if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
					godebug = append(godebug, v)
				}
			}
			if len(godebug) != 1 || godebug[0] != c.want {
				t.Fatalf("GODEBUG %q, want [%q]", godebug, c.want)
			}
			if !slices.Contains(got, "A=1") && slices.Contains(c.env, "A=1") {
				t.Fatalf("lost the rest of the environment: %q", got)
			}
		})
	}
}

// TestExecSetsTheRuntimeSetting runs this test binary as a child that calls
// Exec. The re-executed process was started with the setting (its initial
// environment, /proc/self/environ, which the runtime read) and the same
// arguments, and what it sees and passes on as GODEBUG is what it was given.
func TestExecSetsTheRuntimeSetting(t *testing.T) {
	if os.Getenv("SYSMON_TEST_CHILD") == "1" {
		Exec()
		initial, _ := os.ReadFile("/proc/self/environ")
		var atStart string
		for _, kv := range strings.Split(string(initial), "\x00") {
			if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
				atStart = v
			}
		}
		_, marker := os.LookupEnv(reexecMarker)
		fmt.Printf("at start %q, now %q, marker %v, args %q", atStart, os.Getenv("GODEBUG"), marker, os.Args[1:])
		os.Exit(0)
	}
	for _, before := range []string{"", "gctrace=0"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestExecSetsTheRuntimeSetting$")
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GODEBUG=") })
		cmd.Env = append(cmd.Env, "SYSMON_TEST_CHILD=1")
		if before != "" {
			cmd.Env = append(cmd.Env, "GODEBUG="+before)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		atStart := Setting
		if before != "" {
			atStart = before + "," + Setting
		}
		want := fmt.Sprintf("at start %q, now %q, marker false, args %q", atStart, before, []string{"-test.run=^TestExecSetsTheRuntimeSetting$"})
		if string(out) != want {
			t.Fatalf("child printed\n%s\nwant\n%s", out, want)
		}
	}
}
