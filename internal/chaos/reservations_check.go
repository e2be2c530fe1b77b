package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The end of the reservation workload: once the faults are lifted, every
// reservation ends (the short expiries pass) and the sweeper's pass cleans
// up after the ended ones; then the state is checked (checkReservations):
//
//   - no committed reservation without its bytes at the store (unless its
//     object was since overwritten or deleted through a gateway), nor
//     without them as its key's current catalog entry;
//   - no bytes a worker uploaded under an expired or cancelled reservation
//     left at the store, and every such reservation swept, unless one of
//     its attempts is still open (leased, or unknown: a write that may yet
//     land, whose guard no settle has closed; the sweeper must not mark it
//     swept then, and comes back for it: docs/RESERVATIONS.md). A store
//     that answered a reservation's PUT with a 5xx, or not at all, leaves
//     such an attempt open until its bytes are found or its guard horizon
//     (20 min) passes, far past a campaign;
//   - the quota account's used bytes and objects equal to the catalog's
//     sizes of the committed objects it still pays for, and nothing
//     reserved once no reservation is live;
//   - what the workers were told holds: a PUT acknowledged under a
//     reservation, or a complete answered committed, left it committed on
//     those bytes; a cancel answered 200 left it cancelled.

// reservationRow is a reservation as the catalog holds it.
type reservationRow struct {
	ID, Key, State, ETag string
	Size, Generation     int64
	Reserved             int64 // reserved_bytes
	Released             bool  // its committed object left the account's used bytes
	Swept                bool
	Open                 bool // an attempt of it is leased or unknown: it may not be swept yet
	// Evidence for a violation's line: its sweep's tries and last error,
	// and each of its attempts' op, state, declared size and reason.
	Sweep, Attempts string
}

// objectState is a key's object at the store, or its current catalog entry.
type objectState struct {
	ETag       string
	Size       int64
	Generation int64 // catalog only
	Deleted    bool  // catalog only
}

type quotaState struct {
	Reserved, Used, ReservedObjects, UsedObjects int64
}

// reservationState is everything the end check reads.
type reservationState struct {
	Rows    []reservationRow
	Store   map[string]objectState // key -> the store's object (absent: none)
	Catalog map[string]objectState // key -> the catalog's current entry
	Quota   quotaState
	Log     map[string]*reservationRecord // what the workers did and were told, by id
}

// checkReservations is the end check's verdict: one line per violation.
func checkReservations(st reservationState) []string {
	var out []string
	byID := map[string]reservationRow{}
	var want quotaState
	for _, r := range st.Rows {
		byID[r.ID] = r
		switch r.State {
		case "reserved":
			out = append(out, fmt.Sprintf("reservation %s (%s) still reserved after the sweeper's pass", r.ID, r.Key))
			want.Reserved += r.Reserved
			want.ReservedObjects++
		case "committed":
			if r.Released {
				continue
			}
			obj, ok := st.Store[r.Key]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("committed reservation %s (%s, ETag %s): no bytes at the store", r.ID, r.Key, r.ETag))
			case obj.ETag != r.ETag || obj.Size != r.Size:
				out = append(out, fmt.Sprintf("committed reservation %s (%s, ETag %s, %d B): the store holds ETag %s, %d B", r.ID, r.Key, r.ETag, r.Size, obj.ETag, obj.Size))
			}
			cat, ok := st.Catalog[r.Key]
			switch {
			case !ok || cat.Deleted || cat.Generation != r.Generation:
				out = append(out, fmt.Sprintf("committed reservation %s (%s, generation %d): not the key's current catalog entry (%+v)", r.ID, r.Key, r.Generation, cat))
			default:
				want.Used += cat.Size
				want.UsedObjects++
			}
		case "expired", "cancelled":
			if !r.Swept && !r.Open {
				out = append(out, fmt.Sprintf("%s reservation %s (%s) not swept", r.State, r.ID, r.Key))
			}
			obj, ok := st.Store[r.Key]
			if rec := st.Log[r.ID]; ok && rec != nil && slices.Contains(rec.Uploaded, obj.ETag) {
				out = append(out, fmt.Sprintf("%s reservation %s (%s): bytes uploaded under it (ETag %s) left at the store after the sweeper's pass (the catalog's entry %+v; %s; attempts: %s)",
					r.State, r.ID, r.Key, obj.ETag, st.Catalog[r.Key], r.Sweep, r.Attempts))
			}
		}
	}
	if st.Quota != want {
		out = append(out, fmt.Sprintf("quota account %s: reserved %d B / %d objects, used %d B / %d objects; the catalog says reserved %d / %d, used %d / %d",
			reservationAccount, st.Quota.Reserved, st.Quota.ReservedObjects, st.Quota.Used, st.Quota.UsedObjects,
			want.Reserved, want.ReservedObjects, want.Used, want.UsedObjects))
	}
	ids := make([]string, 0, len(st.Log))
	for id := range st.Log {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		rec := st.Log[id]
		r, ok := byID[id]
		if !ok {
			out = append(out, fmt.Sprintf("reservation %s, created for a worker, is not in the catalog", id))
			continue
		}
		for _, claim := range []struct{ what, etag string }{{"a PUT under it was acknowledged", rec.Acked}, {"a complete answered committed", rec.Completed}} {
			if claim.etag != "" && (r.State != "committed" || r.ETag != claim.etag) {
				out = append(out, fmt.Sprintf("reservation %s: %s (ETag %s), but it is %s (ETag %q)", id, claim.what, claim.etag, r.State, r.ETag))
			}
		}
		if rec.Cancelled && r.State != "cancelled" {
			out = append(out, fmt.Sprintf("reservation %s: a cancel answered 200, but it is %s", id, r.State))
		}
	}
	return out
}

// finishReservations waits for every reservation to end and be swept,
// audits the workload's bucket, checks the end state (retrying for a while:
// a settle or sweep may still be on its way), and says what the workload did.
func (c *Campaign) finishReservations(ctx context.Context, db *catalog) (map[string]int, []string) {
	if c.cfg.Reservations < 0 {
		return nil, nil
	}
	began := time.Now()
	var problems []string
	l := c.resv
	l.mu.Lock()
	counts := make(map[string]int, len(l.counts))
	for k, v := range l.counts {
		counts[k] = v
	}
	problems = append(problems, l.violations...)
	l.mu.Unlock()

	logged := false
	err := waitUntil(ctx, 180*time.Second, func() error {
		if !logged && time.Since(began) > 30*time.Second {
			logged = true
			c.logf("reservations: still waiting for the sweeper after 30 s: %s", stuckReservations(ctx, db))
		}
		var live, unswept int
		// An ended reservation with an attempt still open is not swept
		// until the attempt is settled, which may take the guard horizon:
		// not waited for (checkReservations holds it to its bytes).
		if err := db.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'reserved'),
				count(*) FILTER (WHERE state IN ('expired', 'cancelled') AND swept_at IS NULL AND NOT `+reservationOpen+`)
			FROM reservations r WHERE bucket = $1`, reservationBucket).Scan(&live, &unswept); err != nil {
			return err
		}
		if live+unswept > 0 {
			return fmt.Errorf("%d reservations live, %d ended and not swept: %s", live, unswept, stuckReservations(ctx, db))
		}
		return nil
	})
	if err != nil {
		problems = append(problems, "reservations after the sweeper's pass: "+err.Error())
	}
	swept := time.Since(began)
	if err := c.audit(ctx, db, reservationBucket); err != nil {
		problems = append(problems, err.Error())
	}
	var last []string
	var st reservationState
	_ = waitUntil(ctx, 30*time.Second, func() error {
		if st, err = c.reservationState(ctx, db); err != nil {
			last = []string{"reading the reservations' end state: " + err.Error()}
		} else {
			last = checkReservations(st)
		}
		if len(last) > 0 {
			return fmt.Errorf("%d problems", len(last))
		}
		return nil
	})
	problems = append(problems, last...)
	c.logf("reservations: all ended and swept %s after the final reads, audited and checked after %s: %d problems",
		swept.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond), len(last))
	for _, r := range st.Rows {
		counts["at the end: "+r.State]++
		if !r.Swept && r.Open && r.State != "committed" {
			counts["at the end: "+r.State+", not swept: an attempt still open"]++
		}
		if r.State == "committed" && r.Released {
			counts["at the end: committed, object since removed"]++
		}
	}
	return counts, problems
}

// reservationOpen is true for a reservation row r one of whose attempts is
// leased or unknown (meta's ReservationSwept refuses to mark it swept).
const reservationOpen = `EXISTS (SELECT 1 FROM reservation_attempts a JOIN attempts t USING (attempt_id)
	WHERE a.reservation_id = r.reservation_id AND t.state IN ('leased', 'unknown'))`

// stuckReservations describes a few of the reservations the end waits for
// (not those with an attempt still open).
func stuckReservations(ctx context.Context, db *catalog) string {
	rows, err := db.pool.Query(ctx, `SELECT reservation_id::text, key, state, tries, coalesce(last_error, ''),
			coalesce(to_char(claimed_until - clock_timestamp(), 'SS.MS'), '-'),
			(SELECT string_agg(t.state, ',') FROM reservation_attempts a JOIN attempts t USING (attempt_id)
				WHERE a.reservation_id = r.reservation_id)
		FROM reservations r WHERE bucket = $1 AND (state = 'reserved' OR state IN ('expired', 'cancelled') AND swept_at IS NULL AND NOT `+reservationOpen+`)
		ORDER BY created_at LIMIT 5`, reservationBucket)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, key, state, lastErr, claimLeft string
		var attempts *string
		var tries int
		if err := rows.Scan(&id, &key, &state, &tries, &lastErr, &claimLeft, &attempts); err != nil {
			return err.Error()
		}
		a := "none"
		if attempts != nil {
			a = *attempts
		}
		out = append(out, fmt.Sprintf("%s %s %s (tries %d, claim left %s s, attempts %s, last error %q)", id, key, state, tries, claimLeft, a, firstWords(lastErr, 12)))
	}
	return strings.Join(out, "; ")
}

// reservationState reads the workload's reservations, its bucket's catalog
// and the store's listing of it (straight, with the store's own key), and
// the quota account.
func (c *Campaign) reservationState(ctx context.Context, db *catalog) (reservationState, error) {
	st := reservationState{Store: map[string]objectState{}, Catalog: map[string]objectState{}}
	rows, err := db.pool.Query(ctx, `SELECT reservation_id::text, key, state, coalesce(etag, ''), coalesce(size, 0),
			coalesce(generation, 0), reserved_bytes, released_at IS NOT NULL, swept_at IS NOT NULL, `+reservationOpen+`,
			format('sweep tries %s, last error %s', tries, coalesce(last_error, 'none')),
			coalesce((SELECT string_agg(format('%s %s %s (declared %s B, etag %s, reason %s)', t.attempt_id, t.op, t.state,
					t.declared_size, coalesce(t.etag, '-'), coalesce(t.reason, '-')), '; ' ORDER BY t.created_at)
				FROM reservation_attempts a JOIN attempts t USING (attempt_id) WHERE a.reservation_id = r.reservation_id), 'none')
		FROM reservations r WHERE bucket = $1 ORDER BY created_at`, reservationBucket)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var r reservationRow
		if err := rows.Scan(&r.ID, &r.Key, &r.State, &r.ETag, &r.Size, &r.Generation, &r.Reserved, &r.Released, &r.Swept, &r.Open, &r.Sweep, &r.Attempts); err != nil {
			rows.Close()
			return st, err
		}
		r.ETag = strings.Trim(r.ETag, `"`)
		st.Rows = append(st.Rows, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	rows, err = db.pool.Query(ctx, `SELECT key, generation, coalesce(etag, ''), coalesce(size, 0), deleted FROM catalog WHERE bucket = $1`, reservationBucket)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var k string
		var o objectState
		if err := rows.Scan(&k, &o.Generation, &o.ETag, &o.Size, &o.Deleted); err != nil {
			rows.Close()
			return st, err
		}
		o.ETag = strings.Trim(o.ETag, `"`)
		st.Catalog[k] = o
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	if err := db.pool.QueryRow(ctx, `SELECT reserved_bytes, used_bytes, reserved_objects, used_objects FROM quotas WHERE account = $1`,
		reservationAccount).Scan(&st.Quota.Reserved, &st.Quota.Used, &st.Quota.ReservedObjects, &st.Quota.UsedObjects); err != nil {
		return st, fmt.Errorf("quota account %s: %w", reservationAccount, err)
	}
	cl := c.directClient()
	p := s3.NewListObjectsV2Paginator(cl, &s3.ListObjectsV2Input{Bucket: aws.String(reservationBucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return st, fmt.Errorf("listing %s at the store: %w", reservationBucket, err)
		}
		for _, o := range page.Contents {
			st.Store[aws.ToString(o.Key)] = objectState{ETag: strings.Trim(aws.ToString(o.ETag), `"`), Size: aws.ToInt64(o.Size)}
		}
	}
	c.resv.mu.Lock()
	st.Log = make(map[string]*reservationRecord, len(c.resv.byID))
	for id, r := range c.resv.byID {
		cp := *r
		cp.Uploaded = slices.Clone(r.Uploaded)
		st.Log[id] = &cp
	}
	c.resv.mu.Unlock()
	return st, nil
}
