package gateway

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestCORSMatch(t *testing.T) {
	c, err := parseCORS([]byte(`<CORSConfiguration>
<CORSRule><AllowedOrigin>http://app.example</AllowedOrigin><AllowedMethod>PUT</AllowedMethod><AllowedHeader>Content-*</AllowedHeader></CORSRule>
<CORSRule><AllowedOrigin>https://*.wild.example</AllowedOrigin><AllowedMethod>GET</AllowedMethod><AllowedHeader>*</AllowedHeader></CORSRule>
<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>HEAD</AllowedMethod></CORSRule>
</CORSConfiguration>`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		origin, method string
		headers        []string
		rule           int // -1: none
	}{
		{"http://app.example", "PUT", nil, 0},
		{"http://app.example", "PUT", []string{"content-type", "content-md5"}, 0},
		{"http://app.example", "PUT", []string{"x-amz-acl"}, -1},
		{"http://app.example", "GET", nil, -1},
		{"http://APP.example", "PUT", nil, -1}, // origins compare exactly
		{"https://a.b.wild.example", "GET", []string{"x-anything"}, 1},
		{"https://.wild.example", "GET", nil, 1},
		{"http://x.wild.example", "GET", nil, -1},
		{"https://wild.example", "GET", nil, -1},
		{"http://anyone", "HEAD", nil, 2},
		{"http://anyone", "HEAD", []string{"x-custom"}, -1},
	} {
		got := c.match(tc.origin, tc.method, tc.headers)
		want := (*corsRule)(nil)
		if tc.rule >= 0 {
			want = &c.Rules[tc.rule]
		}
		if got != want {
			t.Errorf("%s %s %v: rule %p, want %p (#%d)", tc.origin, tc.method, tc.headers, got, want, tc.rule)
		}
	}
	if o, cred := c.Rules[2].allowOrigin("http://anyone"); o != "*" || cred {
		t.Errorf("wildcard rule: %q %v", o, cred)
	}
	if o, cred := c.Rules[0].allowOrigin("http://app.example"); o != "http://app.example" || !cred {
		t.Errorf("named origin: %q %v", o, cred)
	}
	var nilConfig *corsConfig
	if nilConfig.match("http://app.example", "GET", nil) != nil {
		t.Error("no configuration matched")
	}
}

// The cache reads a bucket once per TTL, keeps failures for no time, falls
// back to the gateway-wide rule and stays within its bound.
func TestCORSCache(t *testing.T) {
	var reads atomic.Int64
	fail := false
	now := time.Unix(1000, 0)
	c := &corsCache{ttl: 10 * time.Second, fallback: defaultCORS([]string{" http://default.example ", ""}), now: func() time.Time { return now },
		entries: map[string]*corsEntry{},
		fetch: func(_ context.Context, bucket string) ([]byte, bool, error) {
			reads.Add(1)
			if fail {
				return nil, false, errors.New("store down")
			}
			if bucket == "own" {
				return []byte(`<CORSConfiguration><CORSRule><AllowedOrigin>http://own.example</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule></CORSConfiguration>`), true, nil
			}
			return nil, false, nil
		}}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		cfg, err := c.get(ctx, "own")
		if err != nil || cfg.match("http://own.example", "GET", nil) == nil || cfg.match("http://default.example", "GET", nil) != nil {
			t.Fatalf("own bucket: %v %+v", err, cfg)
		}
	}
	if reads.Load() != 1 {
		t.Errorf("%d reads within the TTL, want 1", reads.Load())
	}
	cfg, _ := c.get(ctx, "plain")
	if cfg.match("http://default.example", "PUT", []string{"content-type"}) == nil {
		t.Error("a bucket without configuration does not get the gateway-wide rule")
	}
	now = now.Add(11 * time.Second)
	c.get(ctx, "own")
	if reads.Load() != 3 {
		t.Errorf("after the TTL: %d reads, want 3", reads.Load())
	}
	c.forget("own")
	fail = true
	if _, err := c.get(ctx, "own"); err == nil {
		t.Error("a failed read gave no error")
	}
	fail = false
	if _, err := c.get(ctx, "own"); err != nil {
		t.Errorf("a failed read was kept: %v", err)
	}
	for i := 0; i < corsCacheMax+10; i++ {
		c.get(ctx, "b"+time.Duration(i).String())
	}
	if n := len(c.entries); n > corsCacheMax {
		t.Errorf("%d entries kept, bound %d", n, corsCacheMax)
	}
	if cfg, _ := c.get(ctx, ""); cfg != c.fallback {
		t.Error("no bucket: not the gateway-wide rule")
	}
}
