package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/faultproxy"
)

// A store that takes a request and never answers it (a hung process, a
// network that drops its packets) holds nothing for longer than the store
// answer timeout: a PUT whose answer does not come is given up as a lost
// answer (503 ServiceUnavailable, which clients retry; its attempt unknown,
// the key's lease released), and the retry adopts the write, then makes its
// own; a GET whose answer does not come is a 503 too.
func TestStoreThatNeverAnswersIsGivenUp(t *testing.T) {
	const answerTimeout = 2 * time.Second
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease,
		Configure: func(c *gateway.Config) { c.Store.AnswerTimeout = answerTimeout }})
	bucket := "t-storehang-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)

	answer := func(what string, do func() rawResult) rawResult {
		t.Helper()
		start := time.Now()
		done := make(chan rawResult, 1)
		go func() { done <- do() }()
		select {
		case res := <-done:
			took := time.Since(start)
			t.Logf("%s: %+v after %v", what, res, took.Round(10*time.Millisecond))
			if took < answerTimeout {
				t.Errorf("%s answered after %v, before the answer timeout %v", what, took, answerTimeout)
			}
			return res
		case <-time.After(10 * answerTimeout):
			t.Fatalf("%s: no answer after %v; the store's is held", what, 10*answerTimeout)
		}
		return rawResult{}
	}

	held := fp.HoldResponse(faultproxy.MethodPath("PUT", "/"+bucket+"/k"), 1)
	defer held.Release()
	first := answer("PUT whose store answer is held", func() rawResult {
		return putRaw(g.Endpoint, bucket, "k", []byte("landed, never answered"), nil)
	})
	if first.Err != nil || first.Status != 503 {
		t.Fatalf("first PUT: %+v, want 503", first)
	}
	as := attemptsOf(t, bucket, "k")
	if len(as) != 1 || as[0].State != "unknown" {
		t.Fatalf("attempts after the unanswered PUT: %+v, want one unknown", as)
	}
	start := time.Now()
	second := putRaw(g.Endpoint, bucket, "k", []byte("the retry"), nil)
	if second.Status != 200 || time.Since(start) > answerTimeout {
		t.Fatalf("retry: %+v after %v", second, time.Since(start))
	}
	gens := generationsOf(t, bucket, "k")
	if len(gens) != 2 || gens[0].Attempt != as[0].ID || gens[0].Origin != "adopted" || gens[1].Generation != second.Generation {
		t.Fatalf("generations %+v: want the unanswered write adopted, then the retry", gens)
	}
	audit(t, g.Store, bucket, "k")

	// A body too large for the store client's own connections goes through
	// net/http's transport: the same bound.
	heldBig := fp.HoldResponse(faultproxy.MethodPath("PUT", "/"+bucket+"/big"), 1)
	defer heldBig.Release()
	big := answer("2 MiB PUT whose store answer is held", func() rawResult {
		return putRaw(g.Endpoint, bucket, "big", bytes.Repeat([]byte("b"), 2<<20), nil)
	})
	if big.Err != nil || big.Status != 503 {
		t.Fatalf("2 MiB PUT: %+v, want 503", big)
	}
	if as := attemptsOf(t, bucket, "big"); len(as) != 1 || as[0].State != "unknown" {
		t.Fatalf("attempts after the unanswered 2 MiB PUT: %+v, want one unknown", as)
	}

	heldGet := fp.HoldResponse(faultproxy.MethodPath("GET", "/"+bucket+"/k"), 1)
	defer heldGet.Release()
	get := answer("GET whose store answer is held", func() rawResult {
		return doRaw(g.Endpoint, "GET", "/"+bucket+"/k", nil, nil)
	})
	if get.Err != nil || get.Status != 503 {
		t.Fatalf("GET: %+v, want 503", get)
	}
}

// A store that stops in the middle of an exchange, taking no more of a
// request's body or sending no more of its answer's, holds nothing for
// longer than the store answer timeout either: a PUT whose body the store
// stops taking is given up (its attempt failed, as the store never had the
// whole body; the key's lease released, so a retry goes through at once),
// and a GET whose answer
// stops mid-body is cut off (its client sees the answer end short), over
// plain TCP (the body spliced from the store's socket) and TLS (copied).
func TestStoreThatStallsMidBodyIsGivenUp(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), stallBodySize/16)
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[overTLS], func(t *testing.T) {
			fp, fep := faultStore(t)
			g := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease, TLS: overTLS,
				Configure: func(c *gateway.Config) { c.Store.AnswerTimeout = stallAnswerTimeout }})
			bucket := "t-storestall-" + randomSuffix()
			createBucket(t, g.Endpoint, bucket)
			// The store's side of a PUT is the same whatever the client's
			// connection (and the raw client here speaks plain HTTP only).
			if !overTLS {
				storeStopsTakingAPut(t, fp, g, bucket, body)
			}
			storePausesAGet(t, fp, g, bucket, body, overTLS)
		})
	}
}

const (
	stallAnswerTimeout = 2 * time.Second
	stallBodySize      = 24 << 20 // far more than the sockets between the gateway and the store hold
	stallAfter         = 1 << 20
)

func storeStopsTakingAPut(t *testing.T, fp *faultproxy.HTTP, g *testGateway, bucket string, body []byte) {
	held := fp.StallRequestBody(faultproxy.MethodPath("PUT", "/"+bucket+"/k"), 1, stallAfter)
	defer held.Release()
	start := time.Now()
	done := make(chan rawResult, 1)
	go func() { done <- putRaw(g.Endpoint, bucket, "k", body, nil) }()
	within(t, held.Arrived, 10*stallAnswerTimeout, "the store to stop taking the PUT's body")
	put := within(t, done, 10*stallAnswerTimeout, "answer to the PUT whose body the store stopped taking")
	took := time.Since(start)
	t.Logf("PUT whose body the store stopped taking: %+v after %v", put, took.Round(10*time.Millisecond))
	// The gateway answers while the client is still sending and stops
	// reading its body (it drains 8 MiB, then closes): this client may see
	// the reset before the answer.
	if put.Err == nil && put.Status != 503 || put.Err != nil && !errors.Is(put.Err, syscall.ECONNRESET) {
		t.Errorf("PUT: %+v, want 503 or a reset", put)
	}
	if took < stallAnswerTimeout {
		t.Errorf("PUT answered after %v, before the answer timeout %v", took, stallAnswerTimeout)
	}
	// The store never had the whole body: nothing was published.
	if as := attemptsOf(t, bucket, "k"); len(as) != 1 || as[0].State != "failed" {
		t.Errorf("attempts after the stalled PUT: %+v, want one failed", as)
	}
	start = time.Now()
	if retry := putRaw(g.Endpoint, bucket, "k", []byte("the retry"), nil); retry.Status != 200 || time.Since(start) > stallAnswerTimeout {
		t.Fatalf("retry: %+v after %v", retry, time.Since(start))
	}
	// The store comes back: what it had of the cut request never becomes an
	// object (the proxy forwards the rest the gateway had sent, then finds
	// the connection closed, and ends the store's request short).
	held.Release()
	held.Wait()
	if res, got := doRawBody(g.Endpoint, "GET", "/"+bucket+"/k", nil, nil); res.Status != 200 || string(got) != "the retry" {
		t.Errorf("after the store came back: %+v, %d bytes, want the retry", res, len(got))
	}
	audit(t, g.Store, bucket, "k")
}

func storePausesAGet(t *testing.T, fp *faultproxy.HTTP, g *testGateway, bucket string, body []byte, overTLS bool) {
	key := "big"
	if _, err := g.S3Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(body)}); err != nil {
		t.Fatalf("seeding the GET's object: %v", err)
	}
	held := fp.StallResponseBody(faultproxy.MethodPath("GET", "/"+bucket+"/"+key), 1, stallAfter)
	defer held.Release()
	u, _ := url.Parse(g.URL)
	conn := dialGateway(t, u.Host, overTLS, func(*net.TCPConn) {})
	if _, err := conn.Write(rawSignedHead(t, g.Endpoint, "GET", "/"+bucket+"/"+key, 0, nil)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 || resp.ContentLength != int64(len(body)) {
		t.Fatalf("GET: %v, %v", resp, err)
	}
	within(t, held.Arrived, 10*stallAnswerTimeout, "the store to pause the GET's answer")
	paused := time.Now()
	type read struct {
		n   int64
		err error
	}
	done := make(chan read, 1)
	go func() {
		n, err := io.Copy(io.Discard, resp.Body)
		done <- read{n, err}
	}()
	r := within(t, done, 10*stallAnswerTimeout, "end to the GET's answer the store paused")
	took := time.Since(paused)
	t.Logf("GET whose answer the store paused: %d of %d bytes, %v, after %v", r.n, len(body), r.err, took.Round(10*time.Millisecond))
	if r.err == nil || r.n >= int64(len(body)) {
		t.Errorf("GET: the client read %d of %d bytes, %v: want the answer cut short", r.n, len(body), r.err)
	}
	if took < stallAnswerTimeout-100*time.Millisecond {
		t.Errorf("GET cut %v after the store paused, before the answer timeout %v", took, stallAnswerTimeout)
	}
}
