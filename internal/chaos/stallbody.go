package chaos

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/faultproxy"
)

// storeAnswerTimeout is the campaign gateways' --store-answer-timeout: how
// long the store may go quiet before a gateway gives up on the exchange (the
// store-stall-body fault holds it quiet for longer). Above the store-stall
// fault's longest delay, so that fault stays a delay.
const storeAnswerTimeout = 5 * time.Second

// stallAfter is how much of a large body passes before the store stops.
const stallAfter = 256 << 10

// largeBodies matches the store requests whose body outlasts the sockets'
// buffers: a PutObject or UploadPart of one of the big key's values (sent
// plain with a length, or aws-chunked with its decoded length).
func largeBodies(r *http.Request) bool {
	if r.Method != http.MethodPut || r.Header.Get("X-Amz-Copy-Source") != "" {
		return false
	}
	n := r.ContentLength
	if d := r.Header.Get("X-Amz-Decoded-Content-Length"); d != "" {
		n, _ = strconv.ParseInt(d, 10, 64)
	}
	return n < 0 || n > 1<<20
}

// bigKeyReads matches GetObject of the big key, in any bucket.
func bigKeyReads(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/"+bigKey)
}

// completes matches CompleteMultipartUpload, any key's: the store performs
// it and answers 200 before its document says whether it succeeded, so an
// answer cut in its document leaves the outcome unknown.
func completes(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
}

// completeStallAfter is how much of a Complete's answer document passes.
const completeStallAfter = 16

// stallBodies is the store-stall-body fault: for f.Pause the store stops in
// the middle of gateway g's exchanges (up to f.N large request bodies and
// f.N answers of the big key, after their first 256 KiB; up to f.N
// CompleteMultipartUpload answers, in their document), as a hung store
// process does. Each is held until twice the gateways' store answer timeout
// has passed since the last of them stopped, then let go: by then the
// gateway must have given up on every one itself (a PUT's attempt failed and
// its lease released, a GET's client cut short, a Complete's outcome left
// unknown), so none may run whole once let go. One that does is a violation:
// the gateway waited on a silent store for as long as it was held.
func (c *Campaign) stallBodies(ctx context.Context, g *gatewayProc, f *Fault) string {
	requests := g.storeHTTP.StallRequestBody(largeBodies, f.N, stallAfter)
	answers := g.storeHTTP.StallResponseBody(bigKeyReads, f.N, stallAfter)
	documents := g.storeHTTP.StallResponseBody(completes, f.N, completeStallAfter)
	helds := []*faultproxy.Held{requests, answers, documents}
	var stalled []faultproxy.Event
	last := time.Now()
	window := time.After(f.Pause)
collect:
	for {
		var quiet <-chan time.Time
		if window == nil {
			quiet = time.After(time.Until(last.Add(2 * storeAnswerTimeout)))
		}
		select {
		case ev := <-requests.Arrived:
			stalled, last = append(stalled, ev), time.Now()
		case ev := <-answers.Arrived:
			stalled, last = append(stalled, ev), time.Now()
		case ev := <-documents.Arrived:
			stalled, last = append(stalled, ev), time.Now()
		case <-window:
			// No more stalls begin; one matched already still may.
			g.storeHTTP.Reset()
			window = nil
		case <-quiet:
			break collect
		case <-ctx.Done():
			break collect
		}
	}
	g.storeHTTP.Reset()
	// Let every stalled exchange read on (and any still on its way to its
	// stall point): one the gateway gave up on fails at both ends.
	for _, h := range helds {
		for range f.N {
			h.Release()
		}
	}
	if ctx.Err() != nil {
		return fmt.Sprintf("%d exchanges stalled mid-body; the campaign ended first", len(stalled))
	}
	whole := 0
	for range stalled {
		var ev faultproxy.Event
		select {
		case ev = <-requests.Delivered:
		case ev = <-answers.Delivered:
		case ev = <-documents.Delivered:
		case <-time.After(10 * time.Second):
			continue
		}
		if ev.Whole {
			whole++
			c.addViolation(fmt.Sprintf("store-stall-body: gateway %d waited on a store silent mid-body for %v (%s %s ran whole once let go)",
				g.index, 2*storeAnswerTimeout, ev.Method, ev.Path))
		}
	}
	return fmt.Sprintf("%d exchanges stalled mid-body, %d waited out", len(stalled), whole)
}
