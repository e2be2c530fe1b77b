package gateway

import "io"

// A client that stops reading an answer would otherwise hold its connection,
// the goroutine serving it and the store connection behind a relayed body for
// as long as it likes: one key with read access, or a public object, could
// fill --max-conns with connections that never finish. So a write to a client
// that acknowledges nothing for the send stall timeout ends: the connection
// is closed, counted in fencegate_connections_send_stalled_total. What counts
// as moving is the client acknowledging bytes, looked at every half timeout
// while a write lasts (store/tcpwatch), not a write call returning: a body
// spliced from the store (relay.go) is one call for the whole object. (An
// application that reads at its own slow pace through a large socket buffer
// acknowledges in bursts, as TCP reopens its window only once much of the
// buffer is free: docs/OPERATING.md, Limits, says what pace the timeout
// needs.) A write waiting on its source while the client has taken every
// byte is the source's (a store pausing mid-answer: the store client's own
// watch bounds it), not the client's.

// Write and ReadFrom are the client connection's writes, watched when it has a
// send stall bound. ReadFrom stays net.TCPConn's, so a body from the store's
// socket is still spliced.
func (c *clientConn) Write(p []byte) (int, error) {
	if err := c.send.Start(); err != nil {
		return 0, err
	}
	defer c.send.End()
	return c.TCPConn.Write(p)
}

func (c *clientConn) ReadFrom(r io.Reader) (int64, error) {
	if err := c.send.Start(); err != nil {
		return 0, err
	}
	defer c.send.End()
	return c.TCPConn.ReadFrom(r)
}
