package conformance

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/badinput"
)

// TestBadPutWithoutDatabaseIs4xx: a PutObject whose body betrays a client's
// mistake (a Content-Length shorter than the signed body, or none at all)
// is answered that mistake's 4xx while the gateway cannot reach its
// database, not 503: the reservation check that needs the database waits
// until the body has been received and verified, and a valid PUT is still
// refused 503 (it can take no lease, and its key's reservations are
// unchecked). Found by the chaos campaign (seed 1796283922017553728: the
// corpus sent right after a store-late fault had cut the gateway off).
func TestBadPutWithoutDatabaseIs4xx(t *testing.T) {
	proxy, dbURL := faultDatabase(t)
	g := startGateway(t, gatewayOptions{DatabaseURL: dbURL})
	bucket := "t-nodb-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)

	proxy.Blackhole(true)
	proxy.CutAll()
	defer proxy.Blackhole(false)
	// The gateway notices: its session's heartbeats fail.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := putRaw(g.Endpoint, bucket, "valid", []byte("a valid body"), nil)
		if r.Status == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a valid PUT without the database: %+v, want 503 within 30 s", r)
		}
		time.Sleep(200 * time.Millisecond)
	}

	named := []string{"cl-shorter-than-body", "cl-missing"}
	var cases []badinput.Case
	for _, c := range badinput.Cases() {
		if slices.Contains(named, c.Name) {
			cases = append(cases, c)
		}
	}
	if len(cases) != len(named) {
		t.Fatalf("found %d of the corpus's cases %v", len(cases), named)
	}
	results := badinput.Run(context.Background(), badinput.Target{
		URL: g.URL, AccessKey: g.AccessKey, SecretKey: g.SecretKey, Region: g.Region, Bucket: bucket,
		Timeout: 20 * time.Second,
	}, cases)
	for _, r := range results {
		if r.Err != nil || r.Problem != "" {
			t.Error(r)
		}
	}
	if r := putRaw(g.Endpoint, bucket, "valid", []byte("a valid body"), nil); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("a valid PUT after the corpus, still without the database: %+v, want 503", r)
	}

	proxy.Blackhole(false)
	body := []byte("once the database is back")
	deadline = time.Now().Add(30 * time.Second)
	for {
		r := putRaw(g.Endpoint, bucket, "valid", body, nil)
		if r.Status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a valid PUT with the database back: %+v, want 200 within 30 s", r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := getBody(t, g.Endpoint, bucket, "valid"); !bytes.Equal(got, body) {
		t.Fatalf("GET: %q", got)
	}
}
