// Package sysmon keeps the Go runtime's monitor thread (sysmon) from polling
// every 20 µs after each idle spell of a server process.
//
// The runtime parks sysmon while every P is idle, and the next goroutine to
// enter a system call wakes it with its sleep reset to 20 µs, which it keeps
// for at least 50 polls before it starts doubling (runtime/proc.go, sysmon:
// "If it wakes from a syscall it resets idle and delay"). A gateway goes
// idle between the steps of every request (waiting on PostgreSQL, on the
// store), so its sysmon spends much of its life in 20 µs sleeps: 12.5-16%
// of fencegate's profile samples, plus the context switches (docs/COST.md).
// With GODEBUG's schedtrace set, sysmon never parks (it must stay awake to
// print the trace), so nothing resets its sleep but a P it actually had to
// retake, and it settles at 10 ms. The trace itself is printed when
// schedtrace's period has passed since the machine booted, which at the
// longest period GODEBUG takes (2^31-1 ms, 24.8 days) is one line on
// standard error every 24.8 days of uptime.
//
// Measured with PUT and GET 64 KiB at 32 clients, two binaries alternated
// three times, twice (docs/COST.md, "The runtime's monitor, kept awake"):
// 0.26-0.38 ms of gateway CPU per PUT against 0.34-0.48, 0.07-0.2 ms less
// in every pair. An idle process pays for it: its monitor wakes every 10 ms
// instead of sleeping, about 0.5% of a core here.
package sysmon

import (
	"os"
	"strings"
	"syscall"
)

// Setting is what Environ adds to GODEBUG.
const Setting = "schedtrace=2147483647"

// Environ returns env with Setting added to its GODEBUG, and whether it
// changed anything. A GODEBUG that already names schedtrace is left as it is:
// `GODEBUG=schedtrace=0` is how an operator keeps the runtime's default.
func Environ(env []string) ([]string, bool) {
	out := make([]string, 0, len(env)+1)
	godebug := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			godebug = v
			continue
		}
		out = append(out, kv)
	}
	for _, s := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(s), "schedtrace=") {
			return env, false
		}
	}
	if godebug != "" {
		godebug += ","
	}
	return append(out, "GODEBUG="+godebug+Setting), true
}

// reexecMarker names, in the re-executed process's environment, the GODEBUG
// it was started with before Exec added Setting.
const reexecMarker = "FENCEGATE_GODEBUG_BEFORE_REEXEC"

// Exec re-executes the running binary with the same arguments and
// Environ(os.Environ()), before the process has started anything: the
// runtime reads its GODEBUG settings once, at start-up. It returns only when
// there is nothing to do (the environment names schedtrace already), when
// the binary cannot be re-executed (the process then runs on with the
// runtime's default), or in the re-executed process, which it gives back its
// GODEBUG as it was, so that the processes it starts (`dev run` starts
// PostgreSQL and the store) run as they would have.
func Exec() {
	if before, ok := os.LookupEnv(reexecMarker); ok {
		_ = os.Unsetenv(reexecMarker)
		if before == "" {
			_ = os.Unsetenv("GODEBUG")
		} else {
			_ = os.Setenv("GODEBUG", before)
		}
		return
	}
	env, changed := Environ(os.Environ())
	if !changed {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	_ = syscall.Exec(exe, os.Args, append(env, reexecMarker+"="+os.Getenv("GODEBUG")))
}
