package gateway

import (
	"net"

	"golang.org/x/sys/unix"
)

// ackedBytes is how many bytes the peer has acknowledged on c
// (tcpi_bytes_acked, Linux 4.1 and later).
func ackedBytes(c *net.TCPConn) (uint64, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return 0, false
	}
	return info.Bytes_acked, true
}
