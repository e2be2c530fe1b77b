package chaos

import (
	"strings"
	"testing"
)

// The reservation workload's end check passes a consistent end state and
// names each way one can be wrong: a committed reservation without its bytes
// (at the store, or as its key's catalog entry), bytes uploaded under an
// expired or cancelled reservation left at the store, quota bookkeeping
// apart from the catalog's sizes, a reservation still live or unswept (one
// with an attempt still open may stay unswept, not keep its bytes), and
// an answer a worker got that the end state contradicts.
func TestCheckReservations(t *testing.T) {
	good := func() reservationState {
		return reservationState{
			Rows: []reservationRow{
				{ID: "c1", Key: "k/c1", State: "committed", ETag: "e1", Size: 100, Generation: 3, Reserved: 100},
				{ID: "c2", Key: "k/c2", State: "committed", ETag: "e2", Size: 50, Generation: 4, Reserved: 60, Released: true},
				{ID: "x1", Key: "k/x1", State: "expired", Reserved: 70, Swept: true},
				{ID: "n1", Key: "k/n1", State: "cancelled", Reserved: 80, Swept: true},
				// Not swept while an attempt of it may still land.
				{ID: "x2", Key: "k/x2", State: "expired", Reserved: 30, Open: true},
			},
			Store: map[string]objectState{"k/c1": {ETag: "e1", Size: 100}, "k/c2": {ETag: "other", Size: 9}},
			Catalog: map[string]objectState{
				"k/c1": {ETag: "e1", Size: 100, Generation: 3},
				"k/c2": {ETag: "other", Size: 9, Generation: 5},
				"k/x1": {Generation: 2, Deleted: true},
			},
			Quota: quotaState{Used: 100, UsedObjects: 1},
			Log: map[string]*reservationRecord{
				"c1": {ID: "c1", Key: "k/c1", Uploaded: []string{"e1"}, Acked: "e1", Completed: "e1"},
				"c2": {ID: "c2", Key: "k/c2", Uploaded: []string{"e2"}, Acked: "e2"},
				"x1": {ID: "x1", Key: "k/x1", Uploaded: []string{"ex"}},
				"n1": {ID: "n1", Key: "k/n1", Cancelled: true},
				"x2": {ID: "x2", Key: "k/x2", Uploaded: []string{"ey"}},
			},
		}
	}
	if got := checkReservations(good()); len(got) != 0 {
		t.Fatalf("a consistent end state: %q", got)
	}
	for _, tc := range []struct {
		name  string
		spoil func(*reservationState)
		want  string
	}{
		{"committed without bytes", func(s *reservationState) { delete(s.Store, "k/c1") }, "committed reservation c1 (k/c1, ETag e1): no bytes at the store"},
		{"committed over other bytes", func(s *reservationState) { s.Store["k/c1"] = objectState{ETag: "e9", Size: 100} }, "the store holds ETag e9"},
		{"committed, catalog moved on", func(s *reservationState) { s.Catalog["k/c1"] = objectState{Generation: 4, Deleted: true} }, "not the key's current catalog entry"},
		{"expired reservation's bytes left", func(s *reservationState) { s.Store["k/x1"] = objectState{ETag: "ex", Size: 70} }, "expired reservation x1 (k/x1): bytes uploaded under it (ETag ex) left at the store"},
		{"cancelled reservation's bytes left", func(s *reservationState) {
			s.Log["n1"].Uploaded = []string{"en"}
			s.Store["k/n1"] = objectState{ETag: "en", Size: 80}
		}, "cancelled reservation n1 (k/n1): bytes uploaded under it"},
		{"ended, not swept", func(s *reservationState) { s.Rows[2].Swept = false }, "expired reservation x1 (k/x1) not swept"},
		{"ended, an attempt open, its bytes left", func(s *reservationState) { s.Store["k/x2"] = objectState{ETag: "ey", Size: 30} }, "expired reservation x2 (k/x2): bytes uploaded under it (ETag ey) left at the store"},
		{"used bytes drift", func(s *reservationState) { s.Quota.Used = 109 }, "quota account chaos: reserved 0 B / 0 objects, used 109 B / 1 objects; the catalog says reserved 0 / 0, used 100 / 1"},
		{"reserved bytes left", func(s *reservationState) { s.Quota.Reserved = 70 }, "quota account chaos: reserved 70 B"},
		{"still reserved", func(s *reservationState) { s.Rows[2].State = "reserved" }, "reservation x1 (k/x1) still reserved"},
		{"acknowledged PUT not committed", func(s *reservationState) { s.Rows[0].State, s.Rows[0].ETag = "expired", "" }, "reservation c1: a PUT under it was acknowledged (ETag e1), but it is expired"},
		{"complete answered another ETag", func(s *reservationState) { s.Log["c1"].Completed = "e7" }, "a complete answered committed (ETag e7), but it is committed (ETag \"e1\")"},
		{"cancel answered, not cancelled", func(s *reservationState) { s.Rows[3].State = "expired" }, "reservation n1: a cancel answered 200, but it is expired"},
		{"a worker's reservation missing", func(s *reservationState) { s.Log["z9"] = &reservationRecord{ID: "z9"} }, "reservation z9, created for a worker, is not in the catalog"},
	} {
		st := good()
		tc.spoil(&st)
		got := checkReservations(st)
		found := false
		for _, v := range got {
			found = found || strings.Contains(v, tc.want)
		}
		if !found {
			t.Errorf("%s: got %q, want a violation containing %q", tc.name, got, tc.want)
		}
	}
}
