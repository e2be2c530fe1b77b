package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/sigv4"
)

// metricsShape is /metrics' size and its number of fencegate_ series.
func metricsShape(t *testing.T, s *unitServer) (size, series int) {
	t.Helper()
	_, body := getText(t, s.admin+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "fencegate_") {
			series++
		}
	}
	return len(body), series
}

// Made-up methods and subresources, signed or not, never become label values:
// /metrics stays the same size however many a client sends.
func TestMetricsLabelsBounded(t *testing.T) {
	s := startUnitServer(t, nil)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	send := func(i int) {
		method := randomWord(2000)
		url := fmt.Sprintf("%s/bucket-%d/key?%s=1", s.url, i%3, randomWord(40))
		var req *http.Request
		if i%2 == 0 {
			req, _ = http.NewRequest(method, url, nil) // anonymous
		} else {
			req = signed(t, method, url, nil, 0)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 && resp.StatusCode != 501 {
			t.Fatalf("%d: status %d", i, resp.StatusCode)
		}
	}
	// A first round creates every series these requests can make.
	for i := range 4 {
		send(i)
	}
	size0, series0 := metricsShape(t, s)
	for i := range 50 {
		send(i)
	}
	size1, series1 := metricsShape(t, s)
	t.Logf("/metrics after 4 requests: %d bytes, %d series; after 50 more with random 2000-byte methods and subresources: %d bytes, %d series",
		size0, series0, size1, series1)
	if series1 != series0 || size1 > size0+2048 {
		t.Fatalf("/metrics grew from %d bytes/%d series to %d bytes/%d series", size0, series0, size1, series1)
	}
	_, body := getText(t, s.admin+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "fencegate_requests_total{") &&
			!strings.Contains(line, `op="unauthenticated"`) && !strings.Contains(line, `op="unsupported"`) {
			t.Errorf("unexpected series %s", line)
		}
	}
}

func TestOpLabel(t *testing.T) {
	for _, c := range []struct {
		r    request
		want string
	}{
		{request{}, "unrouted"},
		{request{op: classifyQuery("GET", "b", "k", nil, false)}, "unauthenticated"},
		{request{op: classifyQuery("BREW", "b", "k", nil, false), auth: &sigv4.Auth{}}, "unsupported"},
		{request{op: classifyQuery("GET", "b", "k", []string{"torrent"}, false), auth: &sigv4.Auth{}}, "unsupported"},
		{request{op: classifyQuery("GET", "b", "k", nil, false), auth: &sigv4.Auth{}}, "GetObject"},
	} {
		if got := opLabel(&c.r); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r.op, got, c.want)
		}
	}
	if statusLabel(200) != "200" || statusLabel(0) != "invalid" || statusLabel(1000) != "invalid" {
		t.Error("statusLabel")
	}
}
