package conformance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/meta"
)

// overviewFigures is what the console's overview shows of a status, keyed as
// the page's data-figure attributes: the figures a workload decides (ages
// and times move on their own).
func overviewFigures(s meta.Status) map[string]string {
	f := map[string]string{
		"sessions":          fmt.Sprint(len(s.Sessions)),
		"unknown_guards":    fmt.Sprint(s.UnknownGuards.Count),
		"uploads_open":      fmt.Sprint(s.Uploads.Open),
		"uploads_abandoned": fmt.Sprint(s.Uploads.Abandoned),
		"uploads_unknown":   fmt.Sprint(s.Uploads.Unknown),
		"uploads_foreign":   fmt.Sprint(s.Uploads.Foreign),
		"outbox_rows":       fmt.Sprint(s.Outbox.Rows),
		"outbox_consumers":  fmt.Sprint(s.Outbox.Consumers),
		"outbox_backlog":    fmt.Sprint(s.Outbox.Backlog),
	}
	for k, n := range s.Backlog {
		f["backlog:"+k] = fmt.Sprint(n)
	}
	for g, n := range s.LeasesHeld {
		f["leases_held:"+g] = fmt.Sprint(n)
	}
	return f
}

// consoleDatabase is a migrated database of the test's own and an admin key
// in it, so a gateway on it shows on its console only what the test made.
func consoleDatabase(t *testing.T) (dbURL string, pool *pgxpool.Pool, k meta.AccessKey) {
	t.Helper()
	ctx := context.Background()
	dbURL, err := stack.CreateDatabase(ctx, testenv.DatabaseURL(t), "console_"+randomSuffix())
	if err != nil {
		t.Fatal(err)
	}
	if pool, err = meta.Open(ctx, dbURL, meta.PoolConfig{MaxConns: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := meta.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	key, _ := meta.ParseServerKey(serverKey)
	sealer, err := meta.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	k, err = (&meta.Keys{Pool: pool, Sealer: sealer}).Create(ctx, "console", []meta.Grant{{Bucket: "*", Permission: meta.PermAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	return dbURL, pool, k
}

// The web console's overview, in Debian's chromium: it needs the admin token,
// loads without a console error, and shows what `fencegate status --json`
// (and the page's own JSON form) says of a workload the test made on a
// database of its own.
func TestConsoleOverviewInBrowser(t *testing.T) {
	browser := chromiumPath(t)
	ctx := context.Background()
	dbURL, _, k := consoleDatabase(t)
	const token = "console-test-token-0123456789"
	// One reconciler pass, at start-up: the figures then move only with the
	// workload.
	g, err := stack.StartFencegate(ctx, stack.ServeConfig{
		Bin: fencegateBinary(t), DatabaseURL: dbURL, ServerKey: serverKey, Store: testenv.Store(t),
		LogLevel: "warn", LogPath: filepath.Join(t.TempDir(), "gateway.log"),
		Env: []string{"FENCEGATE_ADMIN_TOKEN=" + token, "FENCEGATE_RECONCILE_INTERVAL=1h"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	ep := stack.Endpoint{URL: g.URL, AccessKey: k.ID, SecretKey: k.Secret, Region: "us-east-1"}
	bucket := testenv.Bucket(t)
	createBucket(t, ep, bucket)
	c := ep.S3Client()
	for i := range 3 {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(fmt.Sprintf("k%d", i)), Body: strings.NewReader("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("left-open")}); err != nil {
		t.Fatal(err)
	}

	// The token is required, as a bearer token or a Basic password.
	overview := g.Admin + "/console/"
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"", "", 401}, {"", "Bearer wrong", 401}, {"", basicAuth("wrong"), 401}, {"overview.json", "", 401},
		{"", basicAuth(token), 200}, {"", "Bearer " + token, 200}, {"overview.json", "Bearer " + token, 200},
	} {
		req, _ := http.NewRequest("GET", overview+c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("GET /console/%s with %q: %d, want %d", c.path, c.auth, resp.StatusCode, c.want)
		}
		if c.want == 401 && c.path == "" && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Fatalf("a refused console page asks for %q, not Basic", resp.Header.Get("WWW-Authenticate"))
		}
	}

	statusJSON := func() meta.Status {
		t.Helper()
		cmd := exec.Command(fencegateBinary(t), "status", "--json")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "FENCEGATE_DATABASE_URL=" + dbURL}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("fencegate status --json: %v", err)
		}
		var s meta.Status
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatalf("fencegate status --json: %v\n%s", err, out)
		}
		return s
	}
	before := overviewFigures(statusJSON())
	if before["uploads_open"] != "1" || before["outbox_rows"] == "0" || before["sessions"] != "1" {
		t.Fatalf("the workload is not in the status: %v", before)
	}

	cb := newConsoleBrowser(t, browser, token)
	shown := cb.load(t, overview, "#overview", "console-overview.png")
	after := overviewFigures(statusJSON())
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("the figures moved while the page loaded: %v, then %v", before, after)
	}
	if fmt.Sprint(shown) != fmt.Sprint(after) {
		t.Fatalf("the overview shows %v; fencegate status --json says %v", shown, after)
	}
	// Its JSON form is status --json's.
	req, _ := http.NewRequest("GET", overview+"overview.json", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s meta.Status
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	if got := overviewFigures(s); fmt.Sprint(got) != fmt.Sprint(after) {
		t.Fatalf("overview.json says %v; fencegate status --json %v", got, after)
	}
}

// consoleBrowser is Debian's chromium sending the admin token with each
// request, noting what the pages log.
type consoleBrowser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func newConsoleBrowser(t *testing.T, browser, token string) *consoleBrowser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
		chromedp.NoSandbox, chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1100, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first call starts the browser: no timeout on it (chromedp.Run).
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	cb := &consoleBrowser{}
	if err := chromedp.Listen(bctx, func(ev any) {
		cb.mu.Lock()
		defer cb.mu.Unlock()
		switch ev := ev.(type) {
		case *cdpruntime.EventExceptionThrown:
			cb.problems = append(cb.problems, "exception: "+ev.ExceptionDetails.Text)
		case *cdpruntime.EventConsoleAPICalled:
			if ev.Type == cdpruntime.ConsoleAPICalledTypeError || ev.Type == cdpruntime.ConsoleAPICalledTypeWarning {
				cb.problems = append(cb.problems, "console."+string(ev.Type))
			}
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
				cb.problems = append(cb.problems, "log: "+ev.Entry.Text)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(tcancel)
	if _, err := chromedp.Call(tctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if _, err := chromedp.Call(tctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": basicAuth(token)}}); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	cb.ctx = tctx
	return cb
}

// load opens url, waits for the element ready, fails the test if the page
// logged an error or a warning, saves a full-page screenshot as shotName
// (under $FENCEGATE_BROWSER_SCREENSHOTS, else a temporary directory) and
// returns the page's data-figure attributes and their text.
func (cb *consoleBrowser) load(t *testing.T, url, ready, shotName string) map[string]string {
	t.Helper()
	nctx, ncancel := context.WithTimeout(cb.ctx, 20*time.Second)
	nav, err := chromedp.Run(nctx, chromedp.NavigateResponse(url))
	ncancel()
	if err != nil {
		t.Fatalf("chromium: %s did not load: %v", url, err)
	}
	if nav.Status != 200 {
		t.Fatalf("chromium: %s answered %d", url, nav.Status)
	}
	if err := chromedp.Do(cb.ctx, chromedp.WaitVisible(ready)); err != nil {
		t.Fatalf("chromium: %s did not show %s: %v", url, ready, err)
	}
	shown := cb.eval(t, `Object.fromEntries([...document.querySelectorAll('[data-figure]')].map(e => [e.dataset.figure, e.textContent.trim()]))`)
	shot, err := chromedp.Run(cb.ctx, chromedp.FullScreenshot(100)) // quality 100: a PNG
	if err != nil {
		t.Fatalf("chromium: screenshot: %v", err)
	}
	shotDir := os.Getenv("FENCEGATE_BROWSER_SCREENSHOTS")
	if shotDir == "" {
		shotDir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(shotDir, shotName), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if len(cb.problems) > 0 {
		t.Fatalf("%s logged: %v", url, cb.problems)
	}
	return shown
}

// eval evaluates a script returning an object of strings in the page.
func (cb *consoleBrowser) eval(t *testing.T, script string) map[string]string {
	t.Helper()
	v, err := chromedp.Run(cb.ctx, chromedp.Evaluate[map[string]string](script))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return v
}

func basicAuth(password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+password))
}
