package badinput

import (
	"context"
	"net"
	"testing"
	"time"
)

// A case the caller gives up on (its context ends: a chaos campaign ending
// mid-case) is no verdict; only the case's own timeout is a hang.
func TestSendCutByCallerIsNoHang(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accepted, never answered
		}
	}()
	raw := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if x := send(ctx, ln.Addr().String(), raw, "GET", 15*time.Second); x.hung || x.err == nil {
		t.Errorf("cut by the caller: hung %v, err %v; want no verdict (an error)", x.hung, x.err)
	}
	if x := send(context.Background(), ln.Addr().String(), raw, "GET", 200*time.Millisecond); !x.hung {
		t.Errorf("no answer within the case's timeout: hung %v, err %v; want a hang", x.hung, x.err)
	}
}
