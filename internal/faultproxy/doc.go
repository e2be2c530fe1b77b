// Package faultproxy provides fault-injection proxies that end-to-end tests put
// in front of real services: a TCP proxy (for PostgreSQL, or any TCP service)
// and an HTTP/1.1 proxy (for the S3 store).
//
// Faults are driven by the test, never by timers: every rule that makes an
// interleaving observable exposes a channel or a [Held] handle, so a test can
// wait until the proxy has reached the critical point, assert on both sides,
// and only then let the request continue.
//
// # TCP
//
// [TCP] forwards every accepted connection to one target. [TCP.Blackhole]
// simulates a partition (bytes are read and dropped in both directions, the
// connections stay open), [TCP.CutAll] resets every connection, and
// [TCP.CutAfterClientSends] lets a client-to-server byte pattern (for example a
// PostgreSQL COMMIT) reach the server and then cuts the connection, so the
// server performs the statement but the client never hears the answer.
//
// # HTTP
//
// [HTTP] forwards each request over its own fresh TCP connection to the
// target, writing the request line with the request-target exactly as the
// client sent it, the Host header as sent, every other header, and the body
// streamed with the same framing (Content-Length copied byte for byte;
// chunked bodies re-chunked). SigV4-signed requests therefore verify at the
// store. Rules ([HTTP.Fail], [HTTP.DropResponse], [HTTP.Hold],
// [HTTP.HoldResponse], [HTTP.Delay]) match requests with a [Match] predicate.
package faultproxy
