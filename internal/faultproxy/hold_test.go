package faultproxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// storeTarget stores PUT bodies and answers GETs with "resp".
func storeTarget(t *testing.T) (*target, *atomic.Value) {
	var stored atomic.Value
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "PUT" {
			b, _ := io.ReadAll(r.Body)
			stored.Store(string(b))
			return
		}
		_, _ = io.WriteString(w, "resp")
	})
	return tg, &stored
}

func TestHTTPHoldRelease(t *testing.T) {
	tg, stored := storeTarget(t)
	p := newHTTPProxy(t, tg)
	h := p.Hold(MethodPath("PUT", "/b/k"), 1)

	res := goDo(t, "PUT", p.URL()+"/b/k?partNumber=1", "data")
	ev := recv(t, h.Arrived, "held request")
	if ev != (Event{Method: "PUT", Path: "/b/k", RawQuery: "partNumber=1"}) {
		t.Fatalf("event %+v", ev)
	}
	// Held: the store has not even been connected to.
	if tg.conns.Load() != 0 || tg.requests.Load() != 0 {
		t.Fatal("the target saw a held request")
	}
	expectPending(t, res)

	h.Release()
	if r := recv(t, res, "released request"); r.err != nil || r.status != 200 {
		t.Fatalf("got %+v", r)
	}
	if tg.requests.Load() != 1 || stored.Load() != "data" {
		t.Fatalf("target requests %d, stored %v", tg.requests.Load(), stored.Load())
	}
	h.Wait()
	if h.Finished() != 1 {
		t.Fatalf("Finished = %d", h.Finished())
	}
}

func TestHTTPHoldDrop(t *testing.T) {
	tg, _ := storeTarget(t)
	p := newHTTPProxy(t, tg)
	h := p.Hold(MethodPath("PUT", "/"), 1)
	res := goDo(t, "PUT", p.URL()+"/b/k", "data")
	recv(t, h.Arrived, "held request")
	h.Drop()
	if r := recv(t, res, "dropped request"); r.err == nil {
		t.Fatalf("client got a response: %+v", r)
	}
	h.Wait()
	if tg.conns.Load() != 0 || tg.requests.Load() != 0 {
		t.Fatal("the target saw a dropped request")
	}
}

// TestHTTPHoldOldestFirst: decisions go to held requests in Arrived order;
// Fail answers without forwarding.
func TestHTTPHoldOldestFirst(t *testing.T) {
	tg, _ := storeTarget(t)
	p := newHTTPProxy(t, tg)
	h := p.Hold(MethodPath("GET", "/o/"), 2)

	resA := goDo(t, "GET", p.URL()+"/o/a", "")
	if ev := recv(t, h.Arrived, "A held"); ev.Path != "/o/a" {
		t.Fatalf("first event %+v", ev)
	}
	resB := goDo(t, "GET", p.URL()+"/o/b", "")
	if ev := recv(t, h.Arrived, "B held"); ev.Path != "/o/b" {
		t.Fatalf("second event %+v", ev)
	}
	h.Fail(503, "<Error><Code>SlowDown</Code></Error>")
	if r := recv(t, resA, "A"); r.status != 503 || r.body != "<Error><Code>SlowDown</Code></Error>" {
		t.Fatalf("A got %+v", r)
	}
	expectPending(t, resB)
	if tg.requests.Load() != 0 {
		t.Fatal("the target saw a failed held request")
	}
	h.Release()
	if r := recv(t, resB, "B"); r.status != 200 || r.body != "resp" {
		t.Fatalf("B got %+v", r)
	}
	h.Wait()
	// The rule is used up.
	if r := recv(t, goDo(t, "GET", p.URL()+"/o/c", ""), "C"); r.status != 200 {
		t.Fatalf("C got %+v", r)
	}
}

func TestHTTPHoldDecisionQueuedBeforeArrival(t *testing.T) {
	tg, _ := storeTarget(t)
	p := newHTTPProxy(t, tg)
	h := p.Hold(MethodPath("", "/"), 1)
	h.Release()
	if r := recv(t, goDo(t, "GET", p.URL()+"/x", ""), "request"); r.status != 200 {
		t.Fatalf("got %+v", r)
	}
	recv(t, h.Arrived, "arrival event")
}

func TestHTTPHoldResponse(t *testing.T) {
	handled := make(chan struct{}, 3)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		handled <- struct{}{}
		w.WriteHeader(202)
		_, _ = io.WriteString(w, "resp")
	})
	p := newHTTPProxy(t, tg)
	h := p.HoldResponse(MethodPath("POST", "/b/"), 3)

	// Release: the store handled it, the client waits until released.
	res := goDo(t, "POST", p.URL()+"/b/k?uploads", "")
	ev := recv(t, h.Arrived, "held response")
	if ev != (Event{Method: "POST", Path: "/b/k", RawQuery: "uploads", Status: 202}) {
		t.Fatalf("event %+v", ev)
	}
	recv(t, handled, "target to handle")
	expectPending(t, res)
	h.Release()
	if r := recv(t, res, "released response"); r.status != 202 || r.body != "resp" {
		t.Fatalf("got %+v", r)
	}

	// Drop: the store did it, the client never hears.
	res = goDo(t, "POST", p.URL()+"/b/k", "")
	recv(t, h.Arrived, "held response")
	h.Drop()
	if r := recv(t, res, "dropped response"); r.err == nil {
		t.Fatalf("client got a response: %+v", r)
	}
	recv(t, handled, "target to handle")

	// Fail: the store's answer is replaced.
	res = goDo(t, "POST", p.URL()+"/b/k", "")
	recv(t, h.Arrived, "held response")
	h.Fail(500, "boom")
	if r := recv(t, res, "replaced response"); r.status != 500 || r.body != "boom" {
		t.Fatalf("got %+v", r)
	}
	recv(t, handled, "target to handle")
	h.Wait()
	if tg.requests.Load() != 3 {
		t.Fatalf("target requests = %d", tg.requests.Load())
	}
}

func TestHTTPCloseDropsHeld(t *testing.T) {
	tg, _ := storeTarget(t)
	p, err := NewHTTP(tg.URL)
	if err != nil {
		t.Fatal(err)
	}
	h := p.Hold(MethodPath("", "/"), -1)
	res := goDo(t, "PUT", p.URL()+"/b/k", "data")
	recv(t, h.Arrived, "held request")
	p.Close()
	if r := recv(t, res, "request after Close"); r.err == nil {
		t.Fatalf("client got a response: %+v", r)
	}
	h.Wait()
	if tg.requests.Load() != 0 {
		t.Fatal("the target saw a request held at Close")
	}
}

func TestHTTPResetRemovesRules(t *testing.T) {
	tg, _ := storeTarget(t)
	p := newHTTPProxy(t, tg)
	p.Fail(MethodPath("", "/"), -1, 500, "")
	if r := recv(t, goDo(t, "GET", p.URL()+"/x", ""), "failed"); r.status != 500 {
		t.Fatalf("got %+v", r)
	}
	p.Reset()
	if r := recv(t, goDo(t, "GET", p.URL()+"/x", ""), "passed"); r.status != 200 {
		t.Fatalf("got %+v", r)
	}
}

// ReleaseDetached delivers a held request in full after its client hung up,
// and reports the store's answer on Delivered.
func TestHoldReleaseDetachedAfterClientGone(t *testing.T) {
	got := make(chan string, 1)
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		w.WriteHeader(http.StatusPreconditionFailed)
	}))
	defer store.Close()
	p, err := NewHTTP(store.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := p.Hold(MethodPath("PUT", "/b/k"), 1)
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")); err != nil {
		t.Fatal(err)
	}
	<-h.Arrived
	conn.Close() // the sender gave up
	h.ReleaseDetached()
	select {
	case ev := <-h.Delivered:
		if ev.Status != http.StatusPreconditionFailed {
			t.Fatalf("delivered: %+v, want the store's 412", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never delivered")
	}
	if b := <-got; b != "hello" {
		t.Fatalf("the store got %q", b)
	}
}
