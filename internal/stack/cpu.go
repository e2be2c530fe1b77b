package stack

import (
	"os"
	"strconv"
	"strings"
)

// Process is one line of /proc/PID/stat, as the benchmarks and measurements
// account CPU: user and system time in clock ticks, each with that of the
// process's reaped children (utime+cutime, stime+cstime).
type Process struct {
	Pid, PPid, Pgrp int
	Comm            string
	User, System    int64
}

// ClockTick is USER_HZ, 100 on every Linux this runs on.
const ClockTick = 100.0

// Processes reads /proc/*/stat for every process.
func Processes() []Process {
	ents, _ := os.ReadDir("/proc")
	var out []Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProcess(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

func readProcess(pid int) (Process, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Process{}, false
	}
	s := string(b)
	lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if lp < 0 || rp < lp {
		return Process{}, false
	}
	f := strings.Fields(s[rp+1:])
	if len(f) < 15 {
		return Process{}, false
	}
	p := Process{Pid: pid, Comm: s[lp+1 : rp]}
	p.PPid, _ = strconv.Atoi(f[1])
	p.Pgrp, _ = strconv.Atoi(f[2])
	tick := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
	p.User = tick(11) + tick(13)   // utime + cutime
	p.System = tick(12) + tick(14) // stime + cstime
	return p, true
}

// GroupCPU is the CPU seconds, user and system, used so far by the
// processes of group pgid and their direct children (PostgreSQL's backends
// call setsid, leaving the postmaster's group), reaped children included.
func GroupCPU(pgid int) (user, system float64) {
	if pgid == 0 {
		return 0, 0
	}
	var u, s int64
	for _, p := range Processes() {
		if p.Pgrp == pgid || p.PPid == pgid {
			u, s = u+p.User, s+p.System
		}
	}
	return float64(u) / ClockTick, float64(s) / ClockTick
}
