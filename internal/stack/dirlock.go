package stack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockDir holds dir for one stack started by this process (`dev run` or
// `dev cluster`), so that a second one on the same folder is told which
// process serves it before it starts anything: otherwise it gets as far as
// its PostgreSQL, which fails on the cluster's own lock file, and says so in
// a page of server log. The hold is an flock on dir/lock, which the kernel
// releases when the process ends however it ends, so no stale lock survives a
// kill; the file names the holder's pid. env is the env file the holder
// writes, named to the one refused. unlock releases the hold.
func LockDir(dir, what, env string) (unlock func(), err error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return nil, heldError(dir, what, env, strings.TrimSpace(string(b)))
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

func heldError(dir, what, env, pid string) error {
	if _, err := strconv.Atoi(pid); err != nil {
		// Locked, and its pid not written yet: the other one is starting.
		return fmt.Errorf("another %s is starting in %s: wait for it, or give this one its own --dir", what, dir)
	}
	return fmt.Errorf("another %s (pid %s) is serving the stack in %s: use it (its settings are in %s), "+
		"or stop it first (Ctrl-C where it runs, or kill -INT %s), or give this one its own --dir",
		what, pid, dir, env, pid)
}

// DirHolder is the pid of the live process holding dir (LockDir), or 0. It
// reads the lock file and asks the kernel whether that process is alive and
// a fencegate; it takes no lock, so it never stands in a starting stack's way.
func DirHolder(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "lock"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return 0
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || !strings.Contains(string(cmdline), "fencegate") {
		return 0
	}
	return pid
}
