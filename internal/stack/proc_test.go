package stack

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A store that exits during start-up is an error at once, and stopping it
// returns: the start-up wait took the process's exit off its channel without
// sending it back, and the Stop that followed waited for it for ever (CI,
// 2026-12-07: a chaos campaign's SeaweedFS exited while starting and the
// test binary hung until go test's 45 min timeout).
func TestStoreThatExitsDuringStartUpIsAnError(t *testing.T) {
	ports := SeaweedPorts{}
	done := make(chan error, 1)
	go func() {
		_, err := StartSeaweed(context.Background(), "/bin/false", t.TempDir(), ports, "AKIAEXITS", "exits-during-start-up")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "exited during start-up") {
			t.Fatalf("StartSeaweed with a binary that exits: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("StartSeaweed did not return within 60 s of its process exiting")
	}
	// Any number of waiters see the exit.
	p, err := startProc("false", t.TempDir()+"/false.log", nil, nil, "/bin/false")
	if err != nil {
		t.Fatal(err)
	}
	<-p.done
	for range 3 {
		if !p.hasExited() {
			t.Fatal("hasExited false after the exit")
		}
	}
	p.stop(0, time.Second) // returns at once: the process is gone
}

// FreePort hands out ports below the kernel's ephemeral range, which
// outbound connections never take, each once in a process, free when given.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	lo, hi := portsBelowEphemeral()
	seen := map[int]bool{}
	for range 50 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p >= hi {
			t.Errorf("port %d outside [%d, %d)", p, lo, hi)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}

// The log quoted in a start-up error is this start's: a log file kept
// across `make run`s (PostgreSQL's) quoted every earlier run's shutdown
// before the line that said why this one failed.
func TestStartUpLogIsThisStartsOnly(t *testing.T) {
	logPath := t.TempDir() + "/server.log"
	if err := os.WriteFile(logPath, []byte("an earlier run: database system is shut down\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := startProc("sh", logPath, nil, nil, "/bin/sh", "-c", "echo this start failed; exit 1")
	if err != nil {
		t.Fatal(err)
	}
	<-p.done
	p.stop(0, time.Second)
	if tail := p.logTail(); tail != "this start failed" {
		t.Fatalf("logTail = %q, want this start's line only", tail)
	}
	if b, _ := os.ReadFile(logPath); !strings.HasPrefix(string(b), "an earlier run") {
		t.Fatalf("the log file lost its earlier lines: %q", b)
	}
}
