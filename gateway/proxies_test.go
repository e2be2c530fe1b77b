package gateway

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestTrustedProxiesParse(t *testing.T) {
	p, err := parseTrustedProxies([]string{"10.0.0.0/8", " 192.0.2.1 ", "", "2001:db8::/32", "::ffff:203.0.113.0/120"})
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{
		"10.1.2.3": true, "11.0.0.1": false, "192.0.2.1": true, "192.0.2.2": false,
		"2001:db8::5": true, "2001:db9::5": false, "::ffff:10.0.0.1": true, "203.0.113.7": true,
	} {
		if got := p.trusts(&net.TCPAddr{IP: net.ParseIP(addr)}); got != want {
			t.Errorf("%s: trusted %v, want %v", addr, got, want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "not-an-address", "10.0.0.1/x"} {
		if _, err := parseTrustedProxies([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if (trustedProxies)(nil).trusts(&net.TCPAddr{IP: net.ParseIP("127.0.0.1")}) {
		t.Error("no list trusts an address")
	}
}

func TestForwardedFrom(t *testing.T) {
	for _, tc := range []struct {
		headers map[string]string
		want    forwarded
	}{
		{map[string]string{"X-Forwarded-Host": "s3.example:443", "X-Forwarded-Proto": "HTTPS", "X-Forwarded-For": "203.0.113.9"},
			forwarded{"s3.example:443", "https", "203.0.113.9"}},
		{map[string]string{"X-Forwarded-Host": "forged.example, s3.example", "X-Forwarded-For": "1.1.1.1, 203.0.113.9"},
			forwarded{"s3.example", "", "203.0.113.9"}},
		{map[string]string{"Forwarded": `for=1.1.1.1;host=forged, for="[2001:db8::1]:4711";proto=https;host="s3.example"`},
			forwarded{"s3.example", "https", "2001:db8::1"}},
		{map[string]string{"Forwarded": "for=192.0.2.43", "X-Forwarded-Host": "s3.example"},
			forwarded{"s3.example", "", "192.0.2.43"}},
		{map[string]string{"X-Forwarded-Host": "bad host/\r", "X-Forwarded-Proto": "gopher"}, forwarded{}},
		// Names as HAProxy and HTTP/2 proxies send them: lower case.
		{map[string]string{"x-forwarded-host": "s3.example", "x-forwarded-proto": "https", "x-forwarded-for": "203.0.113.9"},
			forwarded{"s3.example", "https", "203.0.113.9"}},
		{map[string]string{"forwarded": "host=s3.example"}, forwarded{host: "s3.example"}},
	} {
		var h fasthttp.RequestHeader
		h.DisableNormalizing() // as the server keeps them
		for k, v := range tc.headers {
			h.Set(k, v)
		}
		if got := forwardedFrom(&h); got != tc.want {
			t.Errorf("%v: %+v, want %+v", tc.headers, got, tc.want)
		}
	}
}

func TestHeaderFold(t *testing.T) {
	var h fasthttp.RequestHeader
	h.DisableNormalizing()
	h.Add("origin", "http://a.example")
	h.Add("X-Forwarded-For", "1.1.1.1")
	h.Add("x-forwarded-for", "2.2.2.2")
	if got := headerFold(&h, "Origin"); got != "http://a.example" {
		t.Errorf("Origin: %q", got)
	}
	if got := headerFold(&h, "X-Forwarded-For"); got != "1.1.1.1,2.2.2.2" {
		t.Errorf("X-Forwarded-For: %q", got)
	}
	if got := headerFold(&h, "Originx"); got != "" {
		t.Errorf("Originx: %q", got)
	}
}

func TestCanonicalExpect(t *testing.T) {
	var req fasthttp.Request
	req.Header.DisableNormalizing()
	req.Header.SetMethod("PUT")
	req.Header.Set("expect", "100-continue")
	if req.MayContinue() {
		t.Fatal("fasthttp found a lower-case expect: the rename is not needed")
	}
	canonicalExpect(&req.Header)
	if !req.MayContinue() {
		t.Fatalf("after the rename fasthttp does not see 100-continue:\n%s", req.Header.String())
	}
	if n := len(req.Header.PeekAll("expect")); n != 0 {
		t.Errorf("the lower-case header is still there (%d)", n)
	}
}
