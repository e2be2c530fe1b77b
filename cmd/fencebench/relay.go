package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/sysmon"
)

// The relay is the least any proxy in front of the store can do: it accepts a
// client's connection, dials the store and copies bytes both ways (io.Copy,
// which splices between the two TCP sockets), reading nothing of HTTP. Its
// cells show what one more hop costs on this machine, whatever the gateway:
// the relay's CPU per operation, and its throughput against the store's, are
// a floor for fencegate's. It runs as a child process of fencebench (the same
// binary, told by relayEnv), in its own process group, so its CPU is counted
// apart as the "gateway" of the relay target.
const (
	relayTarget = "relay"
	relayEnv    = "FENCEBENCH_RELAY_TO" // host:port of the store; set: run as the relay
)

// relayCells are the cells the relay target runs: the small GET and PUT that
// issue 15 judges fencegate's CPU and ratio on, and the large GETs, whose
// target (0.9x the store) is set against the store alone: the relay beside
// them says how much of the gap one more hop takes by itself. The quick run
// has no GET 64 MiB c=4, so the relay runs only the cells the workload has.
var relayCells = []cell{smallPUT, smallGET, {opGET, 64 << 20, 1}, {opGET, 64 << 20, 4}}

// relayMain serves as the relay until its standard input closes (fencebench
// exited): it prints its listening address as its first line of output.
func relayMain(store string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go relayConn(c.(*net.TCPConn), store)
	}
}

func relayConn(client *net.TCPConn, store string) {
	defer client.Close()
	up, err := net.Dial("tcp", store)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		_, _ = io.Copy(up, client)
		_ = up.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(client, up)
}

// relay is a running relay process.
type relay struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (r *relay) stop() {
	if r == nil {
		return
	}
	_ = r.stdin.Close()
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// startRelay starts the relay in front of store; the endpoint it returns is
// the relay's address with the store's own credentials (the relay changes no
// byte, so the store checks the client's signature itself).
func startRelay(ctx context.Context, store stack.Endpoint) (*relay, stack.Endpoint, error) {
	u, err := url.Parse(store.URL)
	if err != nil {
		return nil, stack.Endpoint{}, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, stack.Endpoint{}, err
	}
	cmd := exec.Command(self)
	// The relay runs with the runtime setting fencegate serves with
	// (internal/sysmon), so that it stays the floor for what a Go process
	// relaying the bytes costs.
	env, _ := sysmon.Environ(os.Environ())
	cmd.Env = append(env, relayEnv+"="+u.Host)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, stack.Endpoint{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, stack.Endpoint{}, err
	}
	if err := cmd.Start(); err != nil {
		return nil, stack.Endpoint{}, err
	}
	r := &relay{cmd: cmd, stdin: stdin}
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	select {
	case a := <-addr:
		if a == "" {
			r.stop()
			return nil, stack.Endpoint{}, fmt.Errorf("the relay did not start")
		}
		ep := store
		ep.URL = "http://" + a
		return r, ep, nil
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	r.stop()
	return nil, stack.Endpoint{}, fmt.Errorf("the relay did not start in 10 s")
}

// runs reports whether target t runs cell c: the relay runs only its cells,
// the reservation cell runs through fencegate only.
func (t target) runs(c cell) bool {
	if isReserve(c) || c.op == opPUTNotify {
		return t.name == "fencegate" // reservations and notifications are fencegate's
	}
	return t.name != relayTarget || slices.Contains(relayCells, c)
}

// hopHeader is the table of what one more hop, and one writer per key, cost
// on this machine whatever the gateway.
var hopHeader = []string{"cell", "relay / direct", "relay CPU ms/op", "fencegate / direct", "fencegate CPU ms/op"}

// hopRows are the relay's cells beside fencegate's, and the hot key's ceiling
// with one writer at a time: the store's own one-client PUT back to back,
// 1 / (direct PUT 64 KiB c=1 p50), against the store's hot-key throughput,
// round by round. Rows whose records are missing are left out.
func hopRows(recs []Record) [][]string {
	var rows [][]string
	cpu := func(r *Record) string {
		s, _ := gatewayCPURounds(r)
		return scaled(s, 1000).String()
	}
	for _, c := range relayCells {
		rel, fg := findRec(recs, relayTarget, c), findRec(recs, "fencegate", c)
		rr, okR := ratio(recs, relayTarget, "direct", c)
		fr, okF := ratio(recs, "fencegate", "direct", c)
		if rel == nil || fg == nil || !okR || !okF {
			continue
		}
		rows = append(rows, []string{cellLabel(c), rr.String() + "x", cpu(rel), fr.String() + "x", cpu(fg)})
	}
	if s, ok := serialCeiling(recs); ok {
		fg := "-"
		if fr, ok := ratio(recs, "fencegate", "direct", hotCell); ok {
			fg = fr.String() + "x"
		}
		rows = append(rows, []string{cellLabel(hotCell) + ", one writer at a time: 1 / direct PUT 64 KiB c=1 p50", s.String() + "x", "-", fg, "-"})
	}
	return rows
}

// serialCeiling is, round by round, the hot key's best throughput with one
// writer at a time and nothing but the store's own PUT in the chain, over the
// store's own hot-key throughput.
func serialCeiling(recs []Record) (stats, bool) {
	l, h := findRec(recs, "direct", put64c1), findRec(recs, "direct", hotCell)
	if l == nil || h == nil {
		return stats{}, false
	}
	v := writesPerLatency(h, l)
	if len(v) == 0 {
		return stats{}, false
	}
	for i := range v {
		if v[i] <= 0 {
			return stats{}, false
		}
		v[i] = 1 / v[i] // one write per p50, over the store's own rate
	}
	return summarize(v), true
}
