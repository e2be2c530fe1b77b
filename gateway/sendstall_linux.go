package gateway

import (
	"net"

	"golang.org/x/sys/unix"
)

// sendProgress is how many bytes the peer has acknowledged on c
// (tcpi_bytes_acked, Linux 4.1 and later), and whether any byte written to c
// waits for it (sent and unacknowledged, or not yet sent).
func sendProgress(c *net.TCPConn) (acked uint64, pending, ok bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, false, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return 0, false, false
	}
	return info.Bytes_acked, info.Unacked > 0 || info.Notsent_bytes > 0, true
}
