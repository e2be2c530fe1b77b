package conformance

import (
	"bytes"
	"testing"
	"time"

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
