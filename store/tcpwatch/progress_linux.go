package tcpwatch

import (
	"net"

	"golang.org/x/sys/unix"
)

// sendProgress is how many bytes the peer has acknowledged on c
// (tcpi_bytes_acked, Linux 4.1 and later), and whether any byte written to c
// waits for it (sent and unacknowledged, or not yet sent).
func sendProgress(c *net.TCPConn) (acked uint64, owed, ok bool) {
	info, _, ok := socketState(c)
	if !ok {
		return 0, false, false
	}
	return info.Bytes_acked, info.Unacked > 0 || info.Notsent_bytes > 0, true
}

// receiveProgress is how many bytes the peer has sent on c
// (tcpi_bytes_received, Linux 4.1 and later), and whether the socket holds
// none of them unread.
func receiveProgress(c *net.TCPConn) (received uint64, owed, ok bool) {
	info, unread, ok := socketState(c)
	if !ok {
		return 0, false, false
	}
	return info.Bytes_received, unread == 0, true
}

// socketState is c's TCP_INFO and the bytes its receive queue holds unread
// (SIOCINQ).
func socketState(c *net.TCPConn) (info *unix.TCPInfo, unread int, ok bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, 0, false
	}
	var ierr, qerr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		unread, qerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	}); err != nil || ierr != nil || qerr != nil {
		return nil, 0, false
	}
	return info, unread, true
}
