package gateway

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A refused request without a body leaves its keep-alive connection open:
// nothing of a body is left unread on it. Two unsigned GETs on one raw
// connection are both refused (4xx), the connection kept (before, fasthttp's
// -2 "no length" counted as a body, and every refused GET closed it).
func TestRefusedBodilessRequestKeepsConnection(t *testing.T) {
	s := startUnitServer(t, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	read := func() *http.Response {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i := range 2 {
		if _, err := c.Write([]byte("GET /b/k HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		if resp := read(); resp.StatusCode/100 != 4 || resp.Close {
			t.Fatalf("GET %d: %s, close %v; want a refusal on a connection kept open", i, resp.Status, resp.Close)
		}
	}
}
