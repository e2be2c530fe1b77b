package conformance

import (
	"context"
	"encoding/json"
	"html/template"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencegate/fencegate/internal/testenv"
)

// A real browser (issue 30): Debian's chromium, driven by chromedp, loads a
// page served from another origin than the gateway's. The page uploads one
// file with a presigned PUT and another with a POST policy form, downloads
// both with presigned GETs, and shows what it saw. With a bucket whose CORS
// configuration does not name the page's origin, the browser refuses the
// same page's requests.

// browserPage runs the uploads and downloads it is given in window.plan and
// writes each step's outcome into #out, then shows #done.
var browserPage = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>fencegate browser uploads</title>
<style>body{font-family:sans-serif;margin:2em} pre{background:#eee;padding:1em}</style></head>
<body><h1>Uploads to fencegate from {{.Origin}}</h1><p>gateway: {{.Gateway}}</p>
<pre id="out"></pre><p id="done" style="display:none">done</p>
<script>
const plan = {{.Plan}};
const results = {};
function show() { document.getElementById("out").textContent = JSON.stringify(results, null, 2); }
async function step(name, f) {
  try { results[name] = await f(); } catch (e) { results[name] = {error: String(e)}; }
  show();
}
(async () => {
  await step("put", async () => {
    const r = await fetch(plan.put, {method: "PUT", body: "put from the browser", headers: {"Content-Type": "text/plain"}});
    return {status: r.status, etag: r.headers.get("ETag"), generation: r.headers.get("x-fencegate-generation")};
  });
  await step("post", async () => {
    const fd = new FormData();
    for (const [k, v] of plan.post.fields) fd.append(k, v);
    fd.append("file", new Blob(["posted from the browser"], {type: "text/plain"}), "post.txt");
    const r = await fetch(plan.post.url, {method: "POST", body: fd});
    return {status: r.status, etag: r.headers.get("ETag")};
  });
  await step("getPut", async () => { const r = await fetch(plan.getPut); return {status: r.status, body: await r.text()}; });
  await step("getPost", async () => { const r = await fetch(plan.getPost); return {status: r.status, body: await r.text()}; });
  document.getElementById("done").style.display = "block";
})();
</script></body></html>`))

type pageResult struct {
	Status     int    `json:"status"`
	Body       string `json:"body"`
	ETag       string `json:"etag"`
	Generation string `json:"generation"`
	Error      string `json:"error"`
}

func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	missingClient(t, "chromium not found: install Debian's package with `apt-get install -y chromium` (scripts/ensure-deps.sh --clients)")
	return ""
}

// runPage serves the page for plan from its own origin and loads it in
// chromium; it returns what the page saw, and saves a screenshot of it.
func runPage(t *testing.T, gatewayURL string, plan func(origin string) map[string]any, screenshot string) map[string]pageResult {
	t.Helper()
	browser := chromiumPath(t)
	var origin string
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := json.Marshal(plan(origin))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = browserPage.Execute(w, map[string]any{"Origin": origin, "Gateway": gatewayURL, "Plan": template.JS(p)})
	}))
	t.Cleanup(page.Close)
	// The page on "localhost", the gateway on 127.0.0.1: two origins.
	origin = strings.Replace(page.URL, "127.0.0.1", "localhost", 1)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
		chromedp.NoSandbox, chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1000, 800))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first call starts the browser: no timeout on it (chromedp.Run).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(origin+"/"), chromedp.WaitVisible("#done")); err != nil {
		t.Fatalf("chromium: the page did not finish: %v", err)
	}
	out, err := chromedp.Run(tctx, chromedp.Text("#out"))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100)) // quality 100: a PNG
	if err != nil {
		t.Fatalf("chromium: screenshot: %v", err)
	}
	if screenshot != "" {
		if err := os.WriteFile(screenshot, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot of the page: %s", screenshot)
	}
	results := map[string]pageResult{}
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("the page showed %q: %v", out, err)
	}
	return results
}

func TestBrowserUploads(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ep := g.Endpoint
	open, closed := testenv.Bucket(t), testenv.Bucket(t)
	createBucket(t, ep, open)
	createBucket(t, ep, closed)
	shotDir := os.Getenv("FENCEGATE_BROWSER_SCREENSHOTS")
	if shotDir == "" {
		shotDir = t.TempDir()
	}

	plan := func(bucket string) func(origin string) map[string]any {
		return func(origin string) map[string]any {
			fields := [][2]string{{"key", "post.txt"}}
			for _, f := range postPolicy(ep, time.Now().Add(time.Hour), map[string]string{"bucket": bucket}, map[string]string{"key": "post.txt"}) {
				fields = append(fields, [2]string{f.name, f.value})
			}
			return map[string]any{
				"put":     presigned(t, ep, "PUT", "/"+bucket+"/put.txt"),
				"post":    map[string]any{"url": ep.URL + "/" + bucket, "fields": fields},
				"getPut":  presigned(t, ep, "GET", "/"+bucket+"/put.txt"),
				"getPost": presigned(t, ep, "GET", "/"+bucket+"/post.txt"),
			}
		}
	}

	// The page's origin is known once its server runs: the rule names
	// http://localhost:* for the open bucket, another origin for the closed one.
	putBucketCORS(t, ep, open, `<CORSConfiguration><CORSRule><AllowedOrigin>http://localhost:*</AllowedOrigin>
<AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod><AllowedMethod>POST</AllowedMethod>
<AllowedHeader>*</AllowedHeader><ExposeHeader>ETag</ExposeHeader><ExposeHeader>x-fencegate-generation</ExposeHeader></CORSRule></CORSConfiguration>`)
	putBucketCORS(t, ep, closed, `<CORSConfiguration><CORSRule><AllowedOrigin>https://elsewhere.example</AllowedOrigin>
<AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod><AllowedMethod>POST</AllowedMethod><AllowedHeader>*</AllowedHeader></CORSRule></CORSConfiguration>`)

	got := runPage(t, ep.URL, plan(open), filepath.Join(shotDir, "browser-uploads.png"))
	t.Logf("the page saw: %+v", got)
	if r := got["put"]; r.Status != 200 || r.ETag == "" || r.Generation == "" {
		t.Errorf("presigned PUT from the page: %+v", r)
	}
	if r := got["post"]; r.Status != 204 {
		t.Errorf("POST form from the page: %+v", r)
	}
	if r := got["getPut"]; r.Status != 200 || r.Body != "put from the browser" {
		t.Errorf("presigned GET of the PUT: %+v", r)
	}
	if r := got["getPost"]; r.Status != 200 || r.Body != "posted from the browser" {
		t.Errorf("presigned GET of the POST: %+v", r)
	}
	for key, want := range map[string]string{"put.txt": "put from the browser", "post.txt": "posted from the browser"} {
		if b := getBody(t, testenv.Store(t), open, key); string(b) != want {
			t.Errorf("the store holds %q at %s, want %q", b, key, want)
		}
		if c, ok := catalogOf(t, open, key); !ok || c.Generation == 0 || c.Deleted {
			t.Errorf("the catalog's %s: %+v (present %v)", key, c, ok)
		}
	}

	// The same page against a bucket whose CORS does not name its origin:
	// the browser refuses every request (a TypeError in fetch), and nothing lands.
	got = runPage(t, ep.URL, plan(closed), filepath.Join(shotDir, "browser-refused.png"))
	t.Logf("the page saw: %+v", got)
	for _, step := range []string{"put", "post", "getPut", "getPost"} {
		if r := got[step]; r.Error == "" {
			t.Errorf("%s against a bucket that does not allow the origin: %+v, want a browser error", step, r)
		}
	}
	// The PUT's preflight was refused, so it was never sent. (The POST form
	// is a simple request with no preflight: it is sent, and lands, as at
	// S3; the browser only keeps its answer from the page.)
	if _, ok := catalogOf(t, closed, "put.txt"); ok {
		t.Error("the refused preflight's PUT reached the catalog")
	}
}
