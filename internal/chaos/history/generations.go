package history

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// maxLinesPerKey caps the violations reported per key: one wrong generation
// can make every later operation of its key a violation, and the first few
// say what happened.
const maxLinesPerKey = 20

// RealTimeGenerations checks that generations increase per key in real
// time: for acknowledged operations A and B of one key (OK, Gen > 0) where A
// returned before B was invoked, A.Gen < B.Gen. fencegate's generations come
// from a sequence and are committed under the key's lease, so a write
// started after another was acknowledged must be numbered after it.
// Porcupine's model implies this too, but this check is cheap, exact and
// names both operations.
//
// An open-ended operation (Unknown, or Settled after its client gave up) has
// no real return, so it only ever plays B. Repeated acknowledgements of one
// effect are folded first (see coalesce). Each key is O(n log n): its
// operations sorted by invocation meet a running maximum of the generations
// of those that returned before.
func RealTimeGenerations(ops []Op) []string {
	byKey := map[string][]*Op{}
	for i := range ops {
		if op := &ops[i]; op.Acknowledged() {
			byKey[op.Key] = append(byKey[op.Key], op)
		}
	}
	var out []string
	for _, key := range sortedKeys(byKey) {
		acks, _ := coalesce(byKey[key])
		invoked := slices.Clone(acks)
		slices.SortFunc(invoked, func(a, b *Op) int { return cmp.Compare(a.Invoke, b.Invoke) })
		var returned []*Op
		for _, op := range acks {
			if !op.openEnded() {
				returned = append(returned, op)
			}
		}
		slices.SortFunc(returned, func(a, b *Op) int { return cmp.Compare(a.Return, b.Return) })

		var top *Op // the highest generation among the ops returned so far
		j, n := 0, 0
		for _, b := range invoked {
			for ; j < len(returned) && returned[j].Return < b.Invoke; j++ {
				if top == nil || returned[j].Gen > top.Gen {
					top = returned[j]
				}
			}
			if top == nil || top.Gen < b.Gen {
				continue
			}
			if n++; n <= maxLinesPerKey {
				out = append(out, fmt.Sprintf("key %s: generation %d after %d: %s [%s] was invoked after %s [%s] had returned",
					key, b.Gen, top.Gen, describe(b), origin(b), describe(top), origin(top)))
			}
		}
		if n > maxLinesPerKey {
			out = append(out, fmt.Sprintf("key %s: %d more generations out of real-time order", key, n-maxLinesPerKey))
		}
	}
	return out
}

// Generation is one row of a key's generation history, as the catalog
// records it.
type Generation struct {
	Gen     int64
	ETag    string
	Deleted bool
	Origin  string // fencegate, adopted or external
}

// LostAcks checks that every acknowledged gateway write or delete (OK,
// Gen > 0) is in its key's generation history ("bucket/key" in history):
// the same generation, Deleted for a delete and not for a write, and for a
// write whose ETag the client saw, the same ETag (quotes aside). A gateway
// answers with a generation only after committing it, so a missing or
// different row is an acknowledged write the catalog lost or rewrote.
func LostAcks(ops []Op, history map[string][]Generation) []string {
	index := make(map[string]map[int64][]Generation, len(history))
	for key, gens := range history {
		m := make(map[int64][]Generation, len(gens))
		for _, g := range gens {
			m[g.Gen] = append(m[g.Gen], g)
		}
		index[key] = m
	}
	var out []string
	for i := range ops {
		op := &ops[i]
		if !op.Acknowledged() {
			continue
		}
		rows := index[op.Key][op.Gen]
		if len(rows) == 0 {
			out = append(out, fmt.Sprintf("key %s: generation %d acknowledged but not in the key's history: %s [%s]",
				op.Key, op.Gen, describe(op), origin(op)))
			continue
		}
		var why []string
		for _, g := range rows {
			why = append(why, mismatch(op, g))
			if why[len(why)-1] == "" {
				why = nil
				break
			}
		}
		if why != nil {
			out = append(out, fmt.Sprintf("key %s: generation %d acknowledged as %s [%s] but recorded %s",
				op.Key, op.Gen, describe(op), origin(op), strings.Join(why, "; ")))
		}
	}
	return out
}

// mismatch says how a history row differs from the acknowledged op with its
// generation, "" if it matches.
func mismatch(op *Op, g Generation) string {
	switch {
	case op.Kind == Delete && !g.Deleted:
		return fmt.Sprintf("as a write (etag %s, %s)", g.ETag, g.Origin)
	case op.Kind == Write && g.Deleted:
		return fmt.Sprintf("as a delete (%s)", g.Origin)
	case op.Kind == Write && op.ETag != "" && unquote(op.ETag) != unquote(g.ETag):
		return fmt.Sprintf("with etag %s, not %s (%s)", g.ETag, op.ETag, g.Origin)
	}
	return ""
}

func unquote(etag string) string { return strings.Trim(etag, `"`) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
