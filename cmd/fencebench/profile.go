package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// profileCells are the cells -perf records fencegate's CPU profile for.
var profileCells = []cell{
	{opGET, 64 << 20, 1}, {opGET, 1 << 20, 32}, {opGET, 64 << 10, 32},
	{opPUT, 64 << 20, 1}, {opPUT, 64 << 10, 32}, {opPUT, 4 << 10, 1},
}

// profile runs each of profileCells against fencegate for dur under
// `perf record -g` on the fencegate process, and writes perf's flat and
// cumulative symbol tables to dir. It also counts PostgreSQL write
// transactions per operation. Nothing is written to the results or the docs.
func profile(ctx context.Context, s *benchStack, dir string, dur time.Duration, payload []byte) error {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return fmt.Errorf("-perf needs perf(1) on PATH: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fg := s.targets[1]
	for _, c := range profileCells {
		name := strings.NewReplacer(" ", "-", "=", "").Replace(strings.ToLower(c.String()))
		data := filepath.Join(dir, name+".perf.data")
		rec := exec.CommandContext(ctx, perf, "record", "-F", "999", "-g", "-p", strconv.Itoa(fg.pgid), "-o", data)
		rec.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		var recOut strings.Builder
		rec.Stdout, rec.Stderr = &recOut, &recOut
		if err := rec.Start(); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond) // perf attaches
		commits0 := s.writeTxns()
		sm := runCell(ctx, fg, s.groups(), c, dur, payload)
		commits := s.writeTxns() - commits0
		_ = rec.Process.Signal(syscall.SIGINT)
		err := rec.Wait() // perf ends by the SIGINT: its data file says whether it worked
		if st, serr := os.Stat(data); serr != nil || st.Size() == 0 {
			return fmt.Errorf("perf record: %v\n%s", err, recOut.String())
		}
		var b strings.Builder
		fmt.Fprintf(&b, "fencegate %s: %.1f ops/s, %.1f MiB/s, p50 %.2f ms, p99 %.2f ms, errors %d\n",
			c, sm.opsPerS(), sm.mibPerS(), ms(sm.p50.Seconds()), ms(sm.p99.Seconds()), sm.errors)
		if sm.ops > 0 {
			n := float64(sm.ops)
			fmt.Fprintf(&b, "CPU ms/op: fencegate %.3f, store %.3f, PostgreSQL %.3f, client %.3f; PostgreSQL write transactions/op %.2f\n",
				1000*sm.cpu/n, 1000*sm.storeCPU/n, 1000*sm.dbCPU/n, 1000*sm.client/n, float64(commits)/n)
		}
		for _, view := range [][]string{
			{"--no-children", "--percent-limit", "1"},
			{"--children", "--percent-limit", "4"},
		} {
			args := append([]string{"report", "-i", data, "--stdio", "--sort", "symbol", "-g", "none"}, view...)
			out, err := exec.CommandContext(ctx, perf, args...).Output()
			if err != nil {
				return fmt.Errorf("perf report: %v", err)
			}
			fmt.Fprintf(&b, "\n== perf report %s\n", strings.Join(view, " "))
			for _, line := range strings.Split(string(out), "\n") {
				if line != "" && !strings.HasPrefix(line, "#") {
					b.WriteString(line + "\n")
				}
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name+".txt"), []byte(b.String()), 0o644); err != nil {
			return err
		}
		fmt.Print(b.String(), "\n")
	}
	return nil
}
