package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/internal/console"
	"github.com/fencegate/fencegate/meta"
)

const statusUsage = `usage: fencegate status [--json] [flags]

Shows, from the database alone: live leases per gateway, unknown guards
(count, oldest age), multipart uploads (open, abandoned, Creates whose
upload id is not recorded, foreign), the reconciler's backlog and each
gateway's last pass per work kind, and the outbox backlog.
--upload-abandoned-after decides which uploads count as abandoned,
--upload-create-settle when an open upload without an id stops counting as a
Create in flight: give them the gateways' values.
`

func cmdStatus(ctx context.Context, args []string) error {
	var cfg serveConfig
	f := newFlags("status", statusUsage)
	var asJSON bool
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.database(&cfg.DatabaseURL)
	f.heading("multipart uploads")
	cfg.defineUploadAges(f)
	if err := f.Parse(args); err != nil {
		return err
	}
	pool, err := meta.Open(ctx, cfg.DatabaseURL, meta.PoolConfig{MaxConns: 2, ApplicationName: "fencegate status"})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := checkSchema(ctx, pool); err != nil {
		return err
	}
	// The console's overview: the same figures, and the same JSON.
	c := &console.Console{Catalog: &meta.Catalog{Pool: pool}, UploadIdle: cfg.Lifecycle.UploadIdle, UploadCreateSettle: cfg.Lifecycle.UploadCreateSettle}
	s, err := c.Overview(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return console.WriteJSON(os.Stdout, s)
	}
	printStatus(s)
	return nil
}

func age(seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	return (time.Duration(seconds) * time.Second).String()
}

func printStatus(s meta.Status) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	fmt.Fprintln(w, "LEASES HELD\t")
	if len(s.LeasesHeld) == 0 {
		fmt.Fprintln(w, "  (none)\t")
	}
	var gws []string
	for g := range s.LeasesHeld {
		gws = append(gws, g)
	}
	sort.Strings(gws)
	for _, g := range gws {
		fmt.Fprintf(w, "  %s\t%d\n", g, s.LeasesHeld[g])
	}
	fmt.Fprintln(w, "SESSIONS\t")
	if len(s.Sessions) == 0 {
		fmt.Fprintln(w, "  (none)\t")
	}
	for _, ss := range s.Sessions {
		state := "alive"
		switch {
		case ss.EndedAt != nil:
			state = "ended"
		case !ss.Alive:
			state = "dead"
		}
		live := 0
		for _, l := range ss.Leases {
			if l.Live {
				live++
			}
		}
		fmt.Fprintf(w, "  %s\t%s %s, heartbeat %s ago, %d leases live\n", ss.Gateway, ss.ID[:8], state,
			time.Since(ss.HeartbeatAt).Round(time.Second), live)
	}
	fmt.Fprintf(w, "UNKNOWN GUARDS\t%d (oldest %s)\n", s.UnknownGuards.Count, age(s.UnknownGuards.OldestSeconds))
	fmt.Fprintf(w, "MULTIPART UPLOADS\topen %d, abandoned %d (oldest %s), create unknown %d, foreign %d\n",
		s.Uploads.Open, s.Uploads.Abandoned, age(s.Uploads.OldestAbandonedSeconds), s.Uploads.Unknown, s.Uploads.Foreign)
	fmt.Fprintf(w, "RECONCILER BACKLOG\tunresolved %d, abandoned uploads %d, audited buckets %d\n",
		s.Backlog["unresolved"], s.Backlog["uploads"], s.Backlog["audit"])
	fmt.Fprintf(w, "OUTBOX\t%d rows, %d consumers, backlog %d\n", s.Outbox.Rows, s.Outbox.Consumers, s.Outbox.Backlog)
	for _, t := range s.Notifications {
		fmt.Fprintf(w, "TARGET %s\t%d queued, %d dead letters, lag %.1fs, holder %s\n", t.Name, t.Queued, t.DeadLetters, t.LagSeconds, t.Holder)
	}
	r := s.Reservations.ByState
	fmt.Fprintf(w, "RESERVATIONS\treserved %d, committed %d, expired %d, cancelled %d, failed %d; sweeper backlog %d\n",
		r["reserved"], r["committed"], r["expired"], r["cancelled"], r["failed"], s.Reservations.SweepBacklog)
	fmt.Fprintln(w, "LAST PASSES\t")
	live := map[string]bool{}
	for _, ss := range s.Sessions {
		if ss.Alive && ss.EndedAt == nil {
			live[ss.Gateway] = true
		}
	}
	passes, hidden := passesToShow(s.Passes, live)
	if len(passes) == 0 {
		fmt.Fprintln(w, "  (none)\t")
	} else {
		fmt.Fprintln(w, "  KIND\tGATEWAY\tAGO\tTOOK\tBATCHES\tCLAIMED\tCOMPLETED\tRETRIED\tSKIPPED\tFAILED")
	}
	for _, p := range passes {
		gw := p.Gateway
		if !live[gw] {
			gw += " (gone)"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%dms\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Kind, gw, time.Since(p.StartedAt).Round(time.Second),
			p.DurationMS, p.Batches, p.Claimed, p.Completed, p.Retried, p.Skipped, p.Failed)
	}
	if hidden > 0 {
		w.Flush() // a line of its own, outside the table's columns
		fmt.Printf("  (%d older passes of gateways gone: --json lists them)\n", hidden)
	}
}

// passesToShow is the table's rows of passes (in kind order, as read): the
// live gateways' and, for a kind none of them has run, the newest pass of a
// gateway gone; hidden counts the others, which the database keeps for the
// lease retention and --json lists (every restart is a new gateway).
func passesToShow(all []meta.PassStatus, live map[string]bool) (shown []meta.PassStatus, hidden int) {
	newestGone := map[string]int{} // kind -> index in all, for kinds no live gateway ran
	liveKinds := map[string]bool{}
	for i, p := range all {
		if live[p.Gateway] {
			liveKinds[p.Kind] = true
		} else if j, ok := newestGone[p.Kind]; !ok || p.StartedAt.After(all[j].StartedAt) {
			newestGone[p.Kind] = i
		}
	}
	for i, p := range all {
		if live[p.Gateway] || !liveKinds[p.Kind] && newestGone[p.Kind] == i {
			shown = append(shown, p)
		} else {
			hidden++
		}
	}
	return shown, hidden
}
