package notify

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The record is S3's format; the sequencer orders one key's events as
// strings; the key is URL-encoded as S3 encodes it.
func TestEventBody(t *testing.T) {
	at := time.Date(2026, 12, 2, 15, 4, 5, 6e6, time.UTC)
	e := Event{OutboxID: 42, Target: "t", Name: "ObjectCreated:Copy", Bucket: "b", Key: "dir/a b+c.jpg", Generation: 255,
		ETag: "abc", Size: 7, AttemptID: "u", CommittedAt: at, Tries: 2}
	var doc struct {
		Records []map[string]any
	}
	if err := json.Unmarshal(e.Body(), &doc); err != nil || len(doc.Records) != 1 {
		t.Fatalf("%s: %v", e.Body(), err)
	}
	r := doc.Records[0]
	obj := r["s3"].(map[string]any)["object"].(map[string]any)
	fg := r["fencegate"].(map[string]any)
	for _, c := range []struct {
		got  any
		want any
	}{
		{r["eventVersion"], "2.1"}, {r["eventSource"], "fencegate:s3"}, {r["eventName"], "ObjectCreated:Copy"},
		{r["eventTime"], "2026-12-02T15:04:05.006Z"}, {obj["key"], "dir/a+b%2Bc.jpg"}, {obj["sequencer"], "00000000000000FF"},
		{obj["eTag"], "abc"}, {obj["size"], 7.0}, {fg["eventId"], "42"}, {fg["generation"], 255.0}, {fg["deliveryTry"], 3.0},
		{fg["attemptId"], "u"},
	} {
		if c.got != c.want {
			t.Errorf("got %v, want %v in %s", c.got, c.want, e.Body())
		}
	}
	prev := ""
	for _, g := range []int64{1, 9, 10, 255, 256, 1 << 40} {
		s := Event{Generation: g}.Sequencer()
		if len(s) != 16 || strings.Compare(s, prev) <= 0 {
			t.Fatalf("sequencer of %d is %q, not after %q", g, s, prev)
		}
		prev = s
	}
}

// Back-off doubles per try up to the maximum, with half of it random.
func TestBackoff(t *testing.T) {
	s := NewService(Config{RetryBase: 100 * time.Millisecond, RetryMax: time.Second}, nil, func() string { return "h" }, nil)
	for tries, base := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		base *= time.Millisecond
		for range 50 {
			if d := s.backoff(tries); d < base/2 || d > base {
				t.Fatalf("try %d: back-off %v outside [%v, %v]", tries, d, base/2, base)
			}
		}
	}
}

// The signature header is sha256= and the hex HMAC of the body.
func TestSign(t *testing.T) {
	// The widely published HMAC-SHA256 example: key "key", this message.
	got := Sign("key", []byte("The quick brown fox jumps over the lazy dog"))
	if got != "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8" {
		t.Fatal(got)
	}
}
