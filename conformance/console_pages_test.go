package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/meta"
)

// getConsoleJSON fetches a console JSON form with the token into v and
// returns the status.
func getConsoleJSON(t *testing.T, url, token string, v any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 && v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	return resp.StatusCode
}

// The console's bucket page and a key's history, in Debian's chromium, for a
// workload the test made: a key written three times through the gateway,
// then overwritten around it and repaired by `fencegate audit --repair` (an
// external generation), then a write whose answer the store's proxy drops
// (an unknown attempt). Each page needs the token, logs nothing, and shows
// what the catalog holds; its JSON form says the same.
func TestConsoleBucketAndKeyInBrowser(t *testing.T) {
	browser := chromiumPath(t)
	ctx := context.Background()
	dbURL, pool, k := consoleDatabase(t)
	const token = "console-test-token-0123456789"
	fp, fep := faultStore(t)
	g, err := stack.StartFencegate(ctx, stack.ServeConfig{
		Bin: fencegateBinary(t), DatabaseURL: dbURL, ServerKey: serverKey, Store: fep,
		LogLevel: "warn", LogPath: filepath.Join(t.TempDir(), "gateway.log"),
		Env: []string{"FENCEGATE_ADMIN_TOKEN=" + token, "FENCEGATE_RECONCILE_INTERVAL=1h",
			"FENCEGATE_CONSOLE_SAMPLE_INTERVAL=200ms"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	ep := stack.Endpoint{URL: g.URL, AccessKey: k.ID, SecretKey: k.Secret, Region: "us-east-1"}
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	const hist = "dir/history key"
	for i := range 3 {
		if r := putRaw(ep, bucket, "dir/history%20key", []byte(strings.Repeat("v", i+1)), nil); r.Status != 200 {
			t.Fatalf("PUT %d: %+v", i, r)
		}
	}
	if r := putRaw(ep, bucket, "other", []byte("another key"), nil); r.Status != 200 {
		t.Fatalf("PUT other: %+v", r)
	}
	// Overwritten around the gateway; `fencegate audit --repair` records it.
	st := testenv.Store(t)
	if _, err := st.S3Client().PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(hist),
		Body: strings.NewReader("written around the gateway")}); err != nil {
		t.Fatal(err)
	}
	audit := exec.Command(fencegateBinary(t), "audit", "--repair", bucket)
	audit.Env = append(os.Environ(), "FENCEGATE_DATABASE_URL="+dbURL, "FENCEGATE_SERVER_KEY="+serverKey,
		"FENCEGATE_BACKEND_ENDPOINT="+st.URL, "FENCEGATE_BACKEND_ACCESS_KEY_ID="+st.AccessKey,
		"FENCEGATE_BACKEND_SECRET_ACCESS_KEY="+st.SecretKey)
	if out, err := audit.CombinedOutput(); err != nil && audit.ProcessState.ExitCode() != 3 {
		t.Fatalf("fencegate audit --repair: %v\n%s", err, out)
	}
	// A write whose answer is lost: its attempt is unknown.
	dropped := fp.DropResponse(faultproxy.MethodPath("PUT", "/"+bucket+"/dir/history"), 1)
	if r := putRaw(ep, bucket, "dir/history%20key", []byte("the cut write"), nil); r.Status == 200 {
		t.Fatalf("a PUT with its answer lost: %+v", r)
	}
	<-dropped

	// What the catalog holds.
	var keys, bytes int64
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(size), 0) FROM catalog WHERE bucket = $1 AND NOT deleted`, bucket).Scan(&keys, &bytes); err != nil {
		t.Fatal(err)
	}
	var gens []string // the bucket's generations, newest first
	rows, _ := pool.Query(ctx, `SELECT generation FROM generations WHERE bucket = $1 ORDER BY committed_at DESC, generation DESC`, bucket)
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		gens = append(gens, fmt.Sprint(n))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var keyGens, keyOrigins []string // the key's, newest first
	rows, _ = pool.Query(ctx, `SELECT generation, origin FROM generations WHERE bucket = $1 AND key = $2 ORDER BY generation DESC`, bucket, hist)
	for rows.Next() {
		var n int64
		var o string
		if err := rows.Scan(&n, &o); err != nil {
			t.Fatal(err)
		}
		keyGens, keyOrigins = append(keyGens, fmt.Sprint(n)), append(keyOrigins, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var states []string // the key's attempts, in the order the page lists them
	rows, _ = pool.Query(ctx, `SELECT state FROM attempts WHERE bucket = $1 AND key = $2 ORDER BY created_at DESC`, bucket, hist)
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		states = append(states, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if keys != 2 || len(keyGens) != 4 || keyOrigins[0] != "external" || fmt.Sprint(states) != "[unknown committed committed committed]" {
		t.Fatalf("the workload is not in the catalog: %d keys, generations %v %v, attempts %v", keys, keyGens, keyOrigins, states)
	}

	bucketPage := g.Admin + "/console/buckets/" + bucket
	keyPage := g.Admin + "/console/keys/" + bucket + "/dir/history%20key"
	for _, u := range []string{g.Admin + "/console/buckets/", g.Admin + "/console/charts", g.Admin + "/console/charts.json", bucketPage, bucketPage + ".json", keyPage, keyPage + "?format=json"} {
		if st := getConsoleJSON(t, u, "", nil); st != 401 {
			t.Fatalf("GET %s without the token: %d, want 401", u, st)
		}
		if st := getConsoleJSON(t, u, "wrong", nil); st != 401 {
			t.Fatalf("GET %s with a wrong token: %d, want 401", u, st)
		}
	}
	if st := getConsoleJSON(t, g.Admin+"/console/buckets/no-such-bucket", token, nil); st != 404 {
		t.Fatalf("a bucket the catalog does not know: %d, want 404", st)
	}

	cb := newConsoleBrowser(t, browser, token)
	// The overview links the bucket list, which links the bucket.
	cb.load(t, g.Admin+"/console/buckets/", "#buckets", "console-buckets.png")
	if got := cb.eval(t, `({href: [...document.querySelectorAll('a')].map(a => a.href).join(' ')})`)["href"]; !strings.Contains(got, bucketPage) {
		t.Fatalf("the bucket list does not link %s: %s", bucketPage, got)
	}
	shown := cb.load(t, bucketPage, "#bucket", "console-bucket.png")
	want := map[string]string{"keys": fmt.Sprint(keys), "bytes": fmt.Sprint(bytes), "complete": "complete"}
	var rounds int
	switch err := pool.QueryRow(ctx, `SELECT rounds FROM audit_cursors WHERE bucket = $1`, bucket).Scan(&rounds); {
	case err == nil:
		want["audit_rounds"] = fmt.Sprint(rounds)
	case !errors.Is(err, pgx.ErrNoRows):
		t.Fatal(err)
	}
	if fmt.Sprint(shown) != fmt.Sprint(want) {
		t.Fatalf("the bucket page shows %v; the catalog says %v", shown, want)
	}
	listed := cb.eval(t, `({g: [...document.querySelectorAll('tr[data-generation]')].map(e => e.dataset.generation).join(' ')})`)["g"]
	if listed != strings.Join(gens, " ") {
		t.Fatalf("the bucket page lists generations %q; the catalog %q", listed, strings.Join(gens, " "))
	}
	if got := cb.eval(t, `({href: [...document.querySelectorAll('a')].map(a => a.href).join(' ')})`)["href"]; !strings.Contains(got, keyPage) {
		t.Fatalf("the bucket page does not link the key's history %s: %s", keyPage, got)
	}
	var bv meta.BucketView
	if getConsoleJSON(t, bucketPage+".json", token, &bv) != 200 || bv.Keys != keys || bv.Bytes != bytes || len(bv.Latest) != len(gens) || !bv.Complete {
		t.Fatalf("%s.json: %+v", bucketPage, bv)
	}

	cb.load(t, keyPage, "#key", "console-key.png")
	page := cb.eval(t, `({
		g: [...document.querySelectorAll('h2[data-generation]')].map(e => e.dataset.generation).join(' '),
		o: [...document.querySelectorAll('td[data-origin]')].map(e => e.textContent.trim()).join(' '),
		s: [...document.querySelectorAll('tr[data-state]')].map(e => e.dataset.state).join(' ')})`)
	if page["g"] != strings.Join(keyGens, " ") || page["o"] != strings.Join(keyOrigins, " ") || page["s"] != strings.Join(states, " ") {
		t.Fatalf("the key's history shows generations %q origins %q attempts %q; the catalog %v %v %v",
			page["g"], page["o"], page["s"], keyGens, keyOrigins, states)
	}
	var kh meta.KeyHistory
	if getConsoleJSON(t, keyPage+"?format=json", token, &kh) != 200 || len(kh.Generations) != 4 || len(kh.Pending) != 1 ||
		kh.Pending[0].State != "unknown" || kh.Generations[0].Origin != "external" || len(kh.Generations[0].Attempts) != 0 ||
		len(kh.Generations[1].Attempts) != 1 || kh.Generations[1].Attempts[0].State != "committed" {
		t.Fatalf("the key's history as JSON: %+v", kh)
	}

	// The charts: the last sample's totals are the gateway's own counters
	// (its /metrics) for the workload, which is over.
	req, _ := http.NewRequest("GET", g.Admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	counters := map[string]string{
		"writes":      fmt.Sprint(metricSum(string(text), "fencegate_commits_total", "")),
		"lease_waits": fmt.Sprint(metricSum(string(text), "fencegate_leases_waited_total", "")),
		"refusals": fmt.Sprint(metricSum(string(text), "fencegate_leases_refused_total", "") +
			metricSum(string(text), "fencegate_connections_refused_total", "") + metricSum(string(text), "fencegate_body_memory_refused_total", "")),
		"5xx": fmt.Sprint(metricSum(string(text), "fencegate_requests_total", `status="5`)),
	}
	if counters["writes"] != "4" || counters["5xx"] == "0" {
		t.Fatalf("the gateway's counters do not show the workload: %v", counters)
	}
	// charts.json, as much of it as the test reads.
	type chartsJSON struct {
		Charts []struct {
			Name  string  `json:"name"`
			Total float64 `json:"total"`
		} `json:"charts"`
	}
	totals := func(ch chartsJSON) map[string]string {
		m := map[string]string{}
		for _, c := range ch.Charts {
			m[c.Name] = fmt.Sprint(c.Total)
		}
		return m
	}
	var ch chartsJSON
	waitFor(t, "the charts to sample the workload", 10*time.Second, func() bool {
		ch = chartsJSON{}
		return getConsoleJSON(t, g.Admin+"/console/charts.json", token, &ch) == 200 && fmt.Sprint(totals(ch)) == fmt.Sprint(counters)
	})
	shown = cb.load(t, g.Admin+"/console/charts", "#charts", "console-charts.png")
	if fmt.Sprint(shown) != fmt.Sprint(counters) {
		t.Fatalf("the charts show %v; the gateway's /metrics %v", shown, counters)
	}
	if n := cb.eval(t, `({n: String(document.querySelectorAll('svg polyline').length)})`)["n"]; n != "4" {
		t.Fatalf("the charts page draws %s lines, want 4", n)
	}
}

// metricSum adds the samples of a counter in Prometheus' text format whose
// labels contain label (all if empty).
func metricSum(text, name, label string) float64 {
	var n float64
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') || (label != "" && !strings.Contains(rest, label)) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err == nil {
			n += v
		}
	}
	return n
}
