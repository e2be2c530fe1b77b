package stack

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is a child server process whose output goes to a log file. It dies with
// its parent (Pdeathsig), so a killed test run or `make run` leaves nothing behind,
// and runs in its own process group, so Stop reaches whatever it forked.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	// logStart is the log file's length when this process started: the
	// file is kept across starts, and a start-up error quotes this start's.
	logStart int64
	// done is closed once the process has exited, with its exit in err:
	// any number of waiters see it (a channel of the exit, received and
	// sent back by each, lost it to a waiter that did not send it back, and
	// stop then waited for ever).
	done chan struct{}
	err  error
}

func startProc(name, logPath string, cred *syscall.Credential, env []string, bin string, args ...string) (*proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, err
	}
	// Logs hold object keys and database statements: the starting user's only,
	// also when an older version created them 0644.
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if err := logf.Chmod(0o600); err != nil {
		logf.Close()
		return nil, err
	}
	logStart, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, logFile: logf, logStart: logStart, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// logTail is the end of what this process wrote to its log, for start-up
// error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if int64(len(b)) >= p.logStart {
		b = b[p.logStart:]
	}
	return lastLines(string(b), 20)
}

// stop sends sig to the process group, waits up to grace, then kills the group.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	// Children of the group that outlived their leader.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.logFile.Close()
}

// hasExited reports whether the process has exited.
func (p *proc) hasExited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Pid is the process id, for tests that kill or inspect it.
func (p *proc) Pid() int { return p.cmd.Process.Pid }
