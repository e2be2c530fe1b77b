package main

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/meta"
)

// The table of last passes shows the live gateways' and, for a kind no live
// gateway has run, the newest pass of a gateway gone; the rest are counted
// (before: every gateway seen within the lease retention had its rows, 18
// on this machine after a day of `make run` restarts).
func TestPassesShownAreTheLiveGateways(t *testing.T) {
	now := time.Now()
	pass := func(kind, gw string, ago time.Duration) meta.PassStatus {
		return meta.PassStatus{Kind: kind, Gateway: gw, StartedAt: now.Add(-ago)}
	}
	all := []meta.PassStatus{
		pass("audit", "vm/1/a", time.Hour), pass("audit", "vm/2/b", 2*time.Hour), pass("audit", "vm/9/live", time.Second),
		pass("prune", "vm/1/a", time.Hour), pass("prune", "vm/2/b", 30*time.Minute),
		pass("uploads", "vm/9/live", 2*time.Second),
	}
	shown, hidden := passesToShow(all, map[string]bool{"vm/9/live": true})
	want := []meta.PassStatus{all[2], all[4], all[5]}
	if hidden != 3 || len(shown) != len(want) {
		t.Fatalf("shown %+v, %d hidden; want %+v, 3 hidden", shown, hidden, want)
	}
	for i := range want {
		if shown[i].Kind != want[i].Kind || shown[i].Gateway != want[i].Gateway {
			t.Errorf("row %d: %s %s, want %s %s", i, shown[i].Kind, shown[i].Gateway, want[i].Kind, want[i].Gateway)
		}
	}
}
