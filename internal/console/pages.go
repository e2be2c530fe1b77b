package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fencegate/fencegate/meta"
)

// LatestGenerations bounds the bucket page's list of generations.
const LatestGenerations = 50

func since(t time.Time) string { return age(time.Since(t).Seconds()) }

// bucketURL and keyURL are the console's addresses of a bucket and a key:
// each path segment escaped, the key's slashes kept. (The gateway refuses
// keys with an empty, "." or ".." segment, which a path is cleaned of.)
func bucketURL(bucket string) string { return "/console/buckets/" + url.PathEscape(bucket) }

func keyURL(bucket, key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/console/keys/" + url.PathEscape(bucket) + "/" + strings.Join(segs, "/")
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// wantsJSON: the JSON form of a page is asked for with ?format=json (the
// bucket page also answers NAME.json).
func wantsJSON(r *http.Request) bool { return r.URL.Query().Get("format") == "json" }

func renderHTML(w http.ResponseWriter, t *template.Template, data map[string]any) {
	data["Now"] = time.Now().UTC().Format(time.RFC3339)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = t.Execute(w, data)
}

func renderJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = WriteJSON(w, v)
}

func catalogFailed(w http.ResponseWriter, asJSON bool) {
	if asJSON {
		http.Error(w, `{"error":"the catalog did not answer"}`, http.StatusServiceUnavailable)
		return
	}
	http.Error(w, "the catalog did not answer", http.StatusServiceUnavailable)
}

func (c *Console) buckets(w http.ResponseWriter, r *http.Request, asJSON bool) {
	bs, err := c.Catalog.Buckets(r.Context())
	if err != nil {
		catalogFailed(w, asJSON)
		return
	}
	if bs == nil {
		bs = []meta.BucketSummary{}
	}
	if asJSON {
		renderJSON(w, bs)
		return
	}
	renderHTML(w, bucketsPage, map[string]any{"Buckets": bs})
}

func (c *Console) bucket(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	asJSON := wantsJSON(r)
	v, err := c.Catalog.ReadBucketView(r.Context(), name, LatestGenerations)
	if errors.Is(err, meta.ErrNoBucket) && strings.HasSuffix(name, ".json") {
		// NAME.json is the JSON form, unless a bucket has that name.
		name, asJSON = strings.TrimSuffix(name, ".json"), true
		v, err = c.Catalog.ReadBucketView(r.Context(), name, LatestGenerations)
	}
	switch {
	case errors.Is(err, meta.ErrNoBucket):
		http.Error(w, "no such bucket in the catalog", http.StatusNotFound)
		return
	case err != nil:
		catalogFailed(w, asJSON)
		return
	}
	if v.Latest == nil {
		v.Latest = []meta.Generation{}
	}
	if asJSON {
		renderJSON(w, v)
		return
	}
	renderHTML(w, bucketPage, map[string]any{"V": v, "Limit": LatestGenerations})
}

func (c *Console) key(w http.ResponseWriter, r *http.Request) {
	h, err := c.Catalog.ReadKeyHistory(r.Context(), r.PathValue("bucket"), r.PathValue("key"))
	if err != nil {
		catalogFailed(w, wantsJSON(r))
		return
	}
	if wantsJSON(r) {
		renderJSON(w, h)
		return
	}
	renderHTML(w, keyPage, map[string]any{"H": h})
}

func (c *Console) charts(w http.ResponseWriter, r *http.Request, asJSON bool) {
	if c.Samples == nil {
		http.Error(w, "this console keeps no samples", http.StatusNotFound)
		return
	}
	ch := c.Samples.Charts(time.Now())
	if asJSON {
		renderJSON(w, ch)
		return
	}
	renderHTML(w, chartsPage, map[string]any{"C": ch})
}
