package conformance

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// A writer that finds its key leased waits while the holder's bytes flow (up
// to --lease-wait-max), not a fixed --lease-wait: a long upload does not turn
// every concurrent writer into a 503. A holder whose client stalls gets no
// such credit.
func TestWaiterWaitsWhileHolderProgresses(t *testing.T) {
	cfg := lease.Config{TTL: 10 * time.Second, RenewEvery: 2 * time.Second, Margin: 2 * time.Second,
		WaitMax: time.Second, WaitLimit: 20 * time.Second, ProgressEvery: 200 * time.Millisecond, WaitPoll: 50 * time.Millisecond}
	// Bodies stream (no spool): the holder holds the key while its body flows.
	g := startGateway(t, gatewayOptions{Lease: cfg, BodyStall: 30 * time.Second, Stream: true})
	bucket := "t-wait-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	leased := func(key string) func() bool {
		return func() bool {
			for _, a := range attemptsOf(t, bucket, key) {
				if a.State == "leased" {
					return true
				}
			}
			return false
		}
	}

	// The holder's client sends 2 MiB over about 4 s, 64 KiB at a time.
	const size, piece = 2 << 20, 64 << 10
	conn := startRawPut(t, g.Endpoint, bucket, "flowing", size)
	defer conn.Close()
	chunk := bytes.Repeat([]byte("s"), piece)
	if _, err := conn.Write(chunk); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the slow writer to hold the key", 5*time.Second, leased("flowing"))
	sent := make(chan error, 1)
	go func() {
		for i := 1; i < size/piece; i++ {
			if _, err := conn.Write(chunk); err != nil {
				sent <- err
				return
			}
			time.Sleep(125 * time.Millisecond)
		}
		sent <- nil
	}()
	start := time.Now()
	b := putRaw(g.Endpoint, bucket, "flowing", []byte("the waiter"), nil)
	waited := time.Since(start)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the slow writer: %s", resp.Status)
	}
	if b.Status != 200 {
		t.Fatalf("the waiter, after %s: %+v, want 200 (the holder's bytes were flowing)", waited, b)
	}
	if waited < 2*cfg.WaitMax {
		t.Fatalf("the waiter waited %s: the test did not hold it past its base wait of %s", waited, cfg.WaitMax)
	}
	t.Logf("the waiter waited %s while the holder's body flowed, then wrote", waited.Round(time.Millisecond))
	if got := getBody(t, g.Endpoint, bucket, "flowing"); string(got) != "the waiter" {
		t.Fatalf("content %q, want the waiter's (it wrote last)", got)
	}

	// A holder whose client sent half its body and stopped.
	stalled := startRawPut(t, g.Endpoint, bucket, "stalled", size)
	defer stalled.Close()
	if _, err := stalled.Write(bytes.Repeat([]byte("s"), size/2)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stalled writer to hold the key", 5*time.Second, leased("stalled"))
	start = time.Now()
	b = putRaw(g.Endpoint, bucket, "stalled", []byte("the waiter"), nil)
	waited = time.Since(start)
	if b.Status != 503 || b.Code != "SlowDown" {
		t.Fatalf("the waiter behind a stalled holder: %+v, want 503 SlowDown", b)
	}
	if waited > cfg.WaitMax+5*cfg.ProgressEvery+time.Second {
		t.Fatalf("the waiter behind a stalled holder waited %s, want about the base wait %s", waited, cfg.WaitMax)
	}
	_ = stalled.(*net.TCPConn).SetLinger(0)
}
