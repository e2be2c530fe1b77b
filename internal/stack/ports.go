package stack

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// FreePort finds a loopback TCP port free now, for a server started next.
// It picks below the kernel's ephemeral range: a port from that range (what
// listening on port 0 gives) can be taken by any outbound connection in the
// moment between this check and the server's bind, and SeaweedFS's own
// services connect to each other while they start (CI, 2026-12-07: its filer
// found its port taken, "bind: address already in use", and the campaign's
// store never started). Below the range only another server's bind can take
// it; this process never hands out one port twice.
func FreePort() (int, error) {
	lo, hi := portsBelowEphemeral()
	for range 200 {
		if hi <= lo {
			break
		}
		port := lo + rand.IntN(hi-lo)
		if handOut(port) && PortFree(port) {
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	handOut(port)
	return port, nil
}

// PortFree reports whether a loopback TCP port can be listened on now.
func PortFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// handOut reserves port for this process; false if it was handed out before.
func handOut(port int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	if handedOut.ports[port] {
		return false
	}
	handedOut.ports[port] = true
	return true
}

// portsBelowEphemeral is [lo, hi): up to 12,000 ports under the kernel's
// ephemeral floor (ip_local_port_range), and above 1024.
func portsBelowEphemeral() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	return max(1025, hi-12000), hi
}
