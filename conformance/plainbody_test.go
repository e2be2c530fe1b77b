package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// storeWire records the headers of every object PUT that reaches the store
// through it, in front of the run's SeaweedFS.
type storeWire struct {
	mu   sync.Mutex
	puts map[string]http.Header // by path
	lens map[string]int64
}

// startStoreWire starts the recorder; lie, if set, answers 200 itself to the
// PUTs it picks, as a store that ignores a checksum would.
func startStoreWire(t *testing.T, lie func(*http.Request) bool) (*storeWire, stack.Endpoint) {
	t.Helper()
	st := testenv.Store(t)
	w := &storeWire{puts: map[string]http.Header{}, lens: map[string]int64{}}
	st.URL = startStoreFront(t, st.URL, func(rw http.ResponseWriter, r *http.Request, store http.Handler) {
		if r.Method == http.MethodPut {
			w.mu.Lock()
			w.puts[r.URL.Path], w.lens[r.URL.Path] = r.Header.Clone(), r.ContentLength
			w.mu.Unlock()
			if lie != nil && lie(r) {
				rw.Header().Set("ETag", `"00000000000000000000000000000000"`)
				rw.WriteHeader(http.StatusOK)
				return
			}
		}
		store.ServeHTTP(rw, r)
	})
	return w, st
}

func (w *storeWire) put(t *testing.T, path string) (http.Header, int64) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.puts[path]
	if !ok {
		t.Fatalf("no PUT of %s reached the store", path)
	}
	return h, w.lens[path]
}

func crc32Of(b []byte) string {
	var s [4]byte
	binary.BigEndian.PutUint32(s[:], crc32.ChecksumIEEE(b))
	return base64.StdEncoding.EncodeToString(s[:])
}

// A spooled PutObject body travels to the store plain, its CRC32 in an
// x-amz-checksum-crc32 header, once the start-up probe proved the store
// checks that header and refuses a plain body cut short; before the probe,
// for a streamed body and for any other checksum it keeps the aws-chunked
// framing with a trailer. Either way a body not matching its checksum is
// refused and nothing is published (W9).
func TestSpooledBodyTravelsPlainOnceProbed(t *testing.T) {
	wire, st := startStoreWire(t, nil)
	g := startGateway(t, gatewayOptions{Store: &st})
	bucket := "t-plain-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	body := bytes.Repeat([]byte("plain body "), 6000)
	chunked := func(key string) {
		t.Helper()
		h, n := wire.put(t, "/"+bucket+"/"+key)
		if !strings.Contains(h.Get("Content-Encoding"), "aws-chunked") || h.Get("X-Amz-Trailer") == "" || n == int64(len(body)) {
			t.Fatalf("%s went to the store as Content-Encoding %q, trailer %q, %d bytes: want aws-chunked", key, h.Get("Content-Encoding"), h.Get("X-Amz-Trailer"), n)
		}
	}
	if r := putRaw(g.Endpoint, bucket, "before-probe", body, nil); r.Status != 200 {
		t.Fatalf("PUT before the probe: %d %s %v", r.Status, r.Code, r.Err)
	}
	chunked("before-probe")

	res, err := g.Server.Probe(context.Background(), "fencegate-probe")
	if err != nil {
		t.Fatal(err)
	}
	if !res.PlainChecksums {
		t.Fatalf("SeaweedFS checks x-amz-checksum-crc32 on a plain PUT, the probe says not: %s", res)
	}
	if r := putRaw(g.Endpoint, bucket, "plain", body, nil); r.Status != 200 {
		t.Fatalf("PUT: %d %s %v", r.Status, r.Code, r.Err)
	}
	h, n := wire.put(t, "/"+bucket+"/plain")
	if strings.Contains(h.Get("Content-Encoding"), "aws-chunked") || n != int64(len(body)) ||
		h.Get("X-Amz-Checksum-Crc32") != crc32Of(body) || h.Get("X-Amz-Content-Sha256") != "UNSIGNED-PAYLOAD" || h.Get("X-Amz-Trailer") != "" {
		t.Fatalf("spooled PUT went to the store as Content-Encoding %q, %d bytes, crc32 %q (want %q), payload %q, trailer %q",
			h.Get("Content-Encoding"), n, h.Get("X-Amz-Checksum-Crc32"), crc32Of(body), h.Get("X-Amz-Content-Sha256"), h.Get("X-Amz-Trailer"))
	}
	if got, _, ok := storeGet(t, g.Store, bucket, "plain"); !ok || got != string(body) {
		t.Fatalf("stored %d bytes, want the %d sent", len(got), len(body))
	}

	// The client's own CRC32 travels as the header; a wrong one is refused
	// (by the gateway, which computed the body's as it spooled it, or the
	// store) and nothing is published.
	if r := putRaw(g.Endpoint, bucket, "client-crc", body, map[string]string{"x-amz-checksum-crc32": crc32Of(body)}); r.Status != 200 {
		t.Fatalf("PUT with its right x-amz-checksum-crc32: %d %s %v", r.Status, r.Code, r.Err)
	}
	if h, n := wire.put(t, "/"+bucket+"/client-crc"); h.Get("Content-Encoding") != "" || n != int64(len(body)) || h.Get("X-Amz-Checksum-Crc32") != crc32Of(body) {
		t.Fatalf("a client's CRC32 went as Content-Encoding %q, %d bytes, crc32 %q: want plain", h.Get("Content-Encoding"), n, h.Get("X-Amz-Checksum-Crc32"))
	}
	r := putRaw(g.Endpoint, bucket, "wrong-crc", body, map[string]string{"x-amz-checksum-crc32": crc32Of([]byte("other"))})
	if r.Status != 400 || r.Code != "BadDigest" {
		t.Fatalf("PUT with a wrong x-amz-checksum-crc32: %d %s, want 400 BadDigest", r.Status, r.Code)
	}
	requireAbsent(t, g.Store, bucket, "wrong-crc", "a PUT with a wrong CRC32")

	// Another algorithm keeps the trailer: the probe proved only CRC32.
	sha := sha256.Sum256(body)
	r = putRaw(g.Endpoint, bucket, "sha256", body, map[string]string{"x-amz-checksum-sha256": base64.StdEncoding.EncodeToString(sha[:])})
	if r.Status != 200 {
		t.Fatalf("PUT with its x-amz-checksum-sha256: %d %s %v", r.Status, r.Code, r.Err)
	}
	chunked("sha256")

	// A body over the spool streams, aws-chunked, as before.
	gs := startGateway(t, gatewayOptions{Store: &st, Stream: true})
	if _, err := gs.Server.Probe(context.Background(), "fencegate-probe"); err != nil {
		t.Fatal(err)
	}
	if r := putRaw(gs.Endpoint, bucket, "streamed", body, nil); r.Status != 200 {
		t.Fatalf("streamed PUT: %d %s %v", r.Status, r.Code, r.Err)
	}
	chunked("streamed")
}

// A store that accepts a plain body not matching its x-amz-checksum-crc32
// (here a front that answers the probe's mismatched PUT itself) fails the
// probe's optional check: spooled bodies keep aws-chunked, and the store's
// fencing is still proven.
func TestPlainBodiesNeedTheProbesProof(t *testing.T) {
	wire, st := startStoreWire(t, func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/plain-mismatch") })
	g := startGateway(t, gatewayOptions{Store: &st})
	res, err := g.Server.Probe(context.Background(), "fencegate-probe")
	if err != nil {
		t.Fatal(err)
	}
	if res.PlainChecksums || !res.Fenced() {
		t.Fatalf("a store that keeps a mismatched plain body: plain=%v fenced=%v (%s), want plain false, fenced true", res.PlainChecksums, res.Fenced(), res)
	}
	bucket := "t-plain-lie-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	if r := putRaw(g.Endpoint, bucket, "k", []byte("a spooled body"), nil); r.Status != 200 {
		t.Fatalf("PUT: %d %s %v", r.Status, r.Code, r.Err)
	}
	if h, _ := wire.put(t, "/"+bucket+"/k"); !strings.Contains(h.Get("Content-Encoding"), "aws-chunked") {
		t.Fatalf("with the check failed a spooled body went as Content-Encoding %q, want aws-chunked", h.Get("Content-Encoding"))
	}
}
