package conformance

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
	"time"
)

// A PutObject body up to --spool-max is received whole before the key's
// lease is taken, so concurrent writers of one key publish in the order they
// finish, as S3 does: the last to finish wins.
func TestSpoolLastFinisherWins(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-spool-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)

	// The first client starts its upload and sends it slowly.
	const size = 256 << 10
	first := bytes.Repeat([]byte("1"), size)
	conn := startRawPut(t, g.Endpoint, bucket, "k", size)
	defer conn.Close()
	if _, err := conn.Write(first[:size/2]); err != nil {
		t.Fatal(err)
	}
	// The second client starts later and finishes first: 200 at once, with
	// the first one's body still incomplete.
	start := time.Now()
	second := putRaw(g.Endpoint, bucket, "k", []byte("the second writer"), nil)
	if second.Status != 200 {
		t.Fatalf("the second writer: %+v", second)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the second writer took %s: it waited for the first one's upload", took)
	}
	if n := len(attemptsOf(t, bucket, "k")); n != 1 {
		t.Fatalf("%d attempts while the first body is incomplete, want 1 (the second writer's): no lease before the body is whole", n)
	}
	// The first one finishes and is published last.
	if _, err := conn.Write(first[size/2:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the first writer: %s", resp.Status)
	}
	if got := getBody(t, g.Endpoint, bucket, "k"); !bytes.Equal(got, first) {
		t.Fatalf("the key holds %d bytes %.20q..., want the first writer's (it finished last)", len(got), got)
	}
	gens := generationsOf(t, bucket, "k")
	if len(gens) != 2 || gens[0].Generation != second.Generation || gens[1].ETag != trimQuotes(resp.Header.Get("ETag")) {
		t.Fatalf("generations %+v: want the second writer's, then the first writer's", gens)
	}
	audit(t, g.Store, bucket, "k")
}

// A client that stalls halfway through an 8 MiB body (spooled to a file)
// holds no lease: another client's PUT of the key goes ahead at once, and the
// stalled body, cut off, never reaches the store.
func TestSpoolStalledClientHoldsNoKey(t *testing.T) {
	g := startGateway(t, gatewayOptions{BodyStall: 2 * time.Second})
	bucket := "t-spoolstall-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	const size = 8 << 20
	conn := startRawPut(t, g.Endpoint, bucket, "k", size)
	defer conn.Close()
	if _, err := conn.Write(bytes.Repeat([]byte("s"), size/2)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stalled body to be spooled", 5*time.Second, func() bool { return g.Server.SpooledBytes() == size })
	start := time.Now()
	other := putRaw(g.Endpoint, bucket, "k", []byte("another client"), nil)
	if other.Status != 200 {
		t.Fatalf("another client's PUT: %+v", other)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("another client's PUT took %s behind a stalled one", took)
	}
	// The stall timeout ends the stalled request; its spool space comes back
	// and nothing of it was written.
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("the stalled request: %s, want 400 RequestTimeout", resp.Status)
	}
	waitFor(t, "the spool to be empty", 5*time.Second, func() bool { return g.Server.SpooledBytes() == 0 })
	if got := getBody(t, g.Endpoint, bucket, "k"); string(got) != "another client" {
		t.Fatalf("the key holds %q", got)
	}
	if as := attemptsOf(t, bucket, "k"); len(as) != 1 {
		t.Fatalf("attempts %+v: want only the other client's", as)
	}
}
