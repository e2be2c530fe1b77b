//go:build !linux

package tcpwatch

import "net"

// Elsewhere the kernel's counts are not read: a call is then cut only when
// it has lasted a whole timeout.
func sendProgress(*net.TCPConn) (mark uint64, owed, ok bool)    { return 0, false, false }
func receiveProgress(*net.TCPConn) (mark uint64, owed, ok bool) { return 0, false, false }
