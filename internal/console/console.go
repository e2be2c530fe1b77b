// Package console is the read-only web console on the admin listener: pages
// rendered on the server from the catalog, readable without JavaScript, each
// with a JSON form. The overview's JSON is what `fencegate status --json`
// prints: both come from Overview and WriteJSON.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"html/template"
	"io"
	"net/http"
	"sort"
	"time"

	"github.com/fencegate/fencegate/meta"
)

// Console reads what its pages show from the catalog. The two ages decide
// how multipart uploads are counted, as in `fencegate status`.
type Console struct {
	Catalog            *meta.Catalog
	UploadIdle         time.Duration
	UploadCreateSettle time.Duration
	// Samples feeds the charts page: this gateway's own counters.
	Samples *Sampler
}

// Overview is the overview page's figures: the gateways' sessions and
// leases, unknown guards, uploads, the reconciler's backlog and passes, the
// outbox.
func (c *Console) Overview(ctx context.Context) (meta.Status, error) {
	return c.Catalog.ReadStatus(ctx, c.UploadIdle, c.UploadCreateSettle)
}

// WriteJSON writes v as the console's JSON forms and `fencegate status --json`
// write it: indented by two spaces, one trailing newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

//go:embed *.html
var pages embed.FS

var funcs = template.FuncMap{
	"age":   age,
	"since": since,
	"live": func(ls []meta.SessionLease) int {
		n := 0
		for _, l := range ls {
			if l.Live {
				n++
			}
		}
		return n
	},
	"state": func(s meta.SessionInfo) string {
		switch {
		case s.EndedAt != nil:
			return "ended"
		case !s.Alive:
			return "dead"
		}
		return "alive"
	},
	"bucketURL": bucketURL,
	"keyURL":    keyURL,
	"bytes":     humanBytes,
	"deref":     func(p *int64) int64 { return *p },
}

var (
	overviewPage = page("overview.html")
	bucketsPage  = page("buckets.html")
	bucketPage   = page("bucket.html")
	keyPage      = page("key.html")
	chartsPage   = page("charts.html")
)

func page(name string) *template.Template {
	return template.Must(template.New(name).Funcs(funcs).ParseFS(pages, name, "style.html"))
}

func age(seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	return (time.Duration(seconds) * time.Second).String()
}

// Handler serves /console/ (the overview), /console/buckets/ (the bucket
// list), /console/buckets/NAME (a bucket), /console/keys/BUCKET/KEY (a key's
// history), /console/charts (this gateway's last hour), each with its JSON
// form. The caller guards it (the admin
// listener's token).
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /console/{$}", func(w http.ResponseWriter, r *http.Request) {
		s, err := c.Overview(r.Context())
		if err != nil {
			http.Error(w, "the catalog did not answer", http.StatusServiceUnavailable)
			return
		}
		type kv struct {
			Name  string
			Count int
		}
		var held, backlog []kv
		for g, n := range s.LeasesHeld {
			held = append(held, kv{g, n})
		}
		for k, n := range s.Backlog {
			backlog = append(backlog, kv{k, n})
		}
		for _, l := range [][]kv{held, backlog} {
			sort.Slice(l, func(i, j int) bool { return l[i].Name < l[j].Name })
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_ = overviewPage.Execute(w, map[string]any{"S": s, "Held": held, "Backlog": backlog, "Now": time.Now().UTC().Format(time.RFC3339)})
	})
	mux.HandleFunc("GET /console/buckets/{$}", func(w http.ResponseWriter, r *http.Request) { c.buckets(w, r, wantsJSON(r)) })
	mux.HandleFunc("GET /console/buckets.json", func(w http.ResponseWriter, r *http.Request) { c.buckets(w, r, true) })
	mux.HandleFunc("GET /console/buckets/{name}", c.bucket)
	mux.HandleFunc("GET /console/keys/{bucket}/{key...}", c.key)
	mux.HandleFunc("GET /console/charts", func(w http.ResponseWriter, r *http.Request) { c.charts(w, r, wantsJSON(r)) })
	mux.HandleFunc("GET /console/charts.json", func(w http.ResponseWriter, r *http.Request) { c.charts(w, r, true) })
	mux.HandleFunc("GET /console/overview.json", func(w http.ResponseWriter, r *http.Request) {
		s, err := c.Overview(r.Context())
		if err != nil {
			http.Error(w, `{"error":"the catalog did not answer"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = WriteJSON(w, s)
	})
	return mux
}
