package stack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// One holder at a time; DirHolder names a live one and not a gone one.
func TestLockDirAndHolder(t *testing.T) {
	dir := t.TempDir()
	unlock, err := LockDir(dir, "fencegate dev run", filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockDir(dir, "fencegate dev run", filepath.Join(dir, "env")); err == nil ||
		!strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("a second hold: %v, want one naming pid %d", err, os.Getpid())
	}
	if pid := DirHolder(dir); pid != 0 {
		t.Fatalf("DirHolder names this process (%d): only another one is news", pid)
	}
	unlock()
	unlock, err = LockDir(dir, "fencegate dev run", filepath.Join(dir, "env"))
	if err != nil {
		t.Fatalf("after the unlock: %v", err)
	}
	unlock()

	// A file naming a live fencegate (argv[0] says so) names it.
	holder := exec.Command("bash", "-c", "exec -a fencegate-holder sleep 30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	if err := os.WriteFile(filepath.Join(dir, "lock"), []byte(strconv.Itoa(holder.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; DirHolder(dir) != holder.Process.Pid; i++ {
		if i == 100 { // bash has not exec'd yet, at most a moment
			t.Fatalf("DirHolder did not name the live fencegate-holder (pid %d)", holder.Process.Pid)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A file naming a live process that is not a fencegate, or a gone one.
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleep.Process.Kill()
	for _, pid := range []int{sleep.Process.Pid, 1 << 30} {
		if err := os.WriteFile(filepath.Join(dir, "lock"), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := DirHolder(dir); got != 0 {
			t.Errorf("DirHolder with pid %d in the file: %d, want 0", pid, got)
		}
	}
}
