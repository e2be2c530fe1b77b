package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/internal/chaos/history"
)

// catalog reads fencegate's tables straight, with its own SQL: the campaign
// checks the gateways' records, so it does not read them through the code
// under test.
type catalog struct{ pool *pgxpool.Pool }

func openCatalog(ctx context.Context, url string) (*catalog, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	return &catalog{pool: pool}, nil
}

func (c *catalog) close() { c.pool.Close() }

// leased is nil once no attempt is leased.
func (c *catalog) leased(ctx context.Context) error {
	var n int
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE state = 'leased'`).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%d attempts leased", n)
	}
	return nil
}

// leftover counts the attempts still unknown, by operation.
func (c *catalog) leftover(ctx context.Context) (map[string]int, error) {
	rows, err := c.pool.Query(ctx, `SELECT op, count(*) FROM attempts WHERE state IN ('unknown', 'leased') GROUP BY op`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var op string
		var n int
		if err := rows.Scan(&op, &n); err != nil {
			return nil, err
		}
		m[op] = n
	}
	return m, rows.Err()
}

// generations is every key's generation history.
func (c *catalog) generations(ctx context.Context) (map[string][]history.Generation, error) {
	rows, err := c.pool.Query(ctx, `SELECT bucket, key, generation, coalesce(etag, ''), deleted, origin
		FROM generations ORDER BY bucket, key, generation`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string][]history.Generation{}
	for rows.Next() {
		var b, k string
		var g history.Generation
		if err := rows.Scan(&b, &k, &g.Gen, &g.ETag, &g.Deleted, &g.Origin); err != nil {
			return nil, err
		}
		m[b+"/"+k] = append(m[b+"/"+k], g)
	}
	return m, rows.Err()
}

var digits = regexp.MustCompile(`[0-9]+`)

type attemptRecord struct {
	state, reason string
	gen           int64
	// fence is what the attempt was fenced on, for one whose outcome was
	// unknown at some point: the key's last generation committed before it
	// became unknown (every generation of the key since its lease began was
	// committed under that lease, by its own settle). Absent: no such
	// generation, or a delete.
	fenceETag   string
	fenceAbsent bool
	fenceKnown  bool // it was unknown at some point (attempts.unknown_at)
}

// settleUnknowns resolves the PUTs whose client never learned the outcome
// from the attempt fencegate recorded for them (found by the checksum the
// client declared, unique per value), and says how every unknown outcome was
// settled. A PUT with no attempt was never sent (the attempt row comes before
// any byte reaches the store); one whose attempt was committed or adopted
// took effect with that generation; one whose attempt failed was proven not
// written, unless it was closed past its horizon (settleFromAttempts). These are the gateways' claims, and the check holds them to it: a
// value read after its write was declared failed is a violation. Copies,
// Completes and deletes carry no checksum: one with no attempt of its kind on
// its key begun while it could (sentUntil) was never sent; otherwise it stays
// unknown.
func (c *catalog) settleUnknowns(ctx context.Context, ops []history.Op, start time.Time) (map[string]int, error) {
	begun, err := c.attemptTimes(ctx, start)
	if err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, `SELECT a.bucket, a.key, a.checksum, a.state, coalesce(a.reason, ''), coalesce(a.generation, 0),
			coalesce(f.etag, ''), coalesce(f.deleted, true), a.unknown_at IS NOT NULL
		FROM attempts a LEFT JOIN LATERAL (
			SELECT g.etag, g.deleted FROM generations g
			WHERE g.bucket = a.bucket AND g.key = a.key AND g.committed_at <= a.unknown_at
			ORDER BY g.generation DESC LIMIT 1) f ON true
		WHERE a.op = 'put' AND a.checksum IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byValue := map[string][]attemptRecord{} // "bucket/key checksum"
	for rows.Next() {
		var b, k, sum string
		var a attemptRecord
		if err := rows.Scan(&b, &k, &sum, &a.state, &a.reason, &a.gen, &a.fenceETag, &a.fenceAbsent, &a.fenceKnown); err != nil {
			return nil, err
		}
		if _, v, ok := strings.Cut(sum, ":"); ok {
			sum = v
		}
		byValue[b+"/"+k+" "+sum] = append(byValue[b+"/"+k+" "+sum], a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	byETag := map[string]string{} // a value's body's ETag -> the value
	for _, op := range ops {
		if op.Kind == history.Write && writeOf(op.Value) == "put" {
			byETag[md5Hex(bodyOf(op.Value))] = op.Value
		}
	}
	counts := map[string]int{}
	for i := range ops {
		op := &ops[i]
		if op.Outcome != history.Unknown {
			continue
		}
		if op.Kind == history.Read || op.Gateway < 0 {
			op.Settled = "stays unknown: straight at the store"
			counts[op.Settled]++
			continue
		}
		if op.Kind == history.Delete || writeOf(op.Value) != "put" {
			kind := "delete"
			if op.Kind == history.Write {
				kind = writeOf(op.Value)
			}
			op.Settled = "stays unknown: " + kind + " (an attempt of its kind began while it could)"
			if !begun.any(op.Key, kind, op.Invoke, sentUntil(*op)) {
				op.Outcome, op.Settled = history.Failed, "no attempt: never sent"
			}
			counts[op.Settled]++
			continue
		}
		as := byValue[op.Key+" "+crc32Base64(bodyOf(op.Value))]
		settleFromAttempts(op, as)
		if op.Cond == history.NoCond && (op.Outcome == history.Unknown || strings.HasSuffix(op.Settled, "adopted")) {
			fenceFromAttempts(op, as, byETag)
		}
		counts[op.Settled]++
	}
	return counts, nil
}

// settleFromAttempts settles an unknown PUT from the attempts recorded
// with its value's checksum, holding fencegate to exactly what it claims
// (docs/DESIGN.md, "When a guard ends"). No commit retires an unknown attempt:
// one still unknown stays unknown, free to take effect at any time after its
// invocation. One closed past its horizon cannot land after the generation
// recorded with the close, but may have landed before it (and been replaced
// since): it stays unknown, bounded by the next generation. Any other failure
// (nothing sent, the store refused it, its body never completed) is a proof,
// and the PUT did not take effect.
func settleFromAttempts(op *history.Op, as []attemptRecord) {
	if len(as) == 0 {
		op.Outcome, op.Settled = history.Failed, "no attempt: never sent"
		return
	}
	op.Settled = "stays unknown: attempt " + as[0].state
	for _, a := range as {
		switch {
		case a.state == "committed" || a.state == "adopted":
			op.Outcome, op.Gen, op.Settled, op.Before = history.OK, a.gen, "landed: attempt "+a.state, 0
		case a.state == "failed" && strings.HasPrefix(a.reason, horizonReason):
			if op.Outcome == history.Unknown {
				op.Settled = "stays unknown: closed past its horizon (it may have landed before the generation recorded with the close)"
				op.Before = a.gen + 1
			}
		case a.state == "failed":
			if op.Outcome == history.Unknown {
				op.Outcome, op.Settled = history.Failed, "not written: attempt failed ("+firstWords(a.reason, 6)+")"
			}
		}
	}
}

// fenceFromAttempts gives an unknown or adopted PUT sent without a condition
// of its client's the condition fencegate sent it with: the store applies
// it, if at all, only while that condition holds, so it takes effect only in
// such a state (If-None-Match: * when its fence was an absent key, If-Match
// on the fenced value otherwise). That is the claim that catches a broken
// fence: without it, a late landing over a newer generation, adopted by the
// next settle, would be linearizable.
// Attempts fenced on different states, or on bytes that are no value of the
// campaign's PUTs, leave the PUT unconditional.
func fenceFromAttempts(op *history.Op, as []attemptRecord, byETag map[string]string) {
	cond, value, seen := history.NoCond, "", false
	for _, a := range as {
		switch {
		case op.Outcome == history.OK && a.state != "adopted":
			continue // an adopted PUT: the adopted attempt's fence
		case op.Outcome == history.Unknown && a.state != "unknown" && !(a.state == "failed" && strings.HasPrefix(a.reason, horizonReason)):
			continue
		case !a.fenceKnown:
			return // never unknown (adopted from a dead holder's lease): its fence is not known
		}
		c, v := history.IfNoneMatch, ""
		if !a.fenceAbsent {
			var ok bool
			if v, ok = byETag[a.fenceETag]; !ok {
				return
			}
			c = history.IfMatch
		}
		if seen && (c != cond || v != value) {
			return
		}
		cond, value, seen = c, v, true
	}
	op.Cond, op.CondValue = cond, value
	if cond != history.NoCond {
		op.Settled += "; fenced"
	}
}

// horizonReason begins the reason of an attempt fencegate closed past its
// guard horizon (lease/settle.go).
const horizonReason = "past its horizon"

// attemptBegins are the times attempts began, per key and operation, in ns
// since the campaign's start (PostgreSQL runs on this machine's clock).
type attemptBegins map[string][]int64

func (c *catalog) attemptTimes(ctx context.Context, start time.Time) (attemptBegins, error) {
	rows, err := c.pool.Query(ctx, `SELECT bucket, key, op, created_at FROM attempts WHERE op <> 'put'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := attemptBegins{}
	for rows.Next() {
		var b, k, op string
		var at time.Time
		if err := rows.Scan(&b, &k, &op, &at); err != nil {
			return nil, err
		}
		m[b+"/"+k+" "+op] = append(m[b+"/"+k+" "+op], at.Sub(start).Nanoseconds())
	}
	return m, rows.Err()
}

// sentUntil is the last moment an attempt of op can begin: its return if a
// gateway answered it, else never bounded. A gateway goes on with a request
// whose client (or the balancer between them) has gone, after a wait for the
// key's lease, so its attempt may begin after the client's return (seed
// 1796666188590256824: a copy whose connection the balancer's restart cut
// landed 0.4 s later).
func sentUntil(op history.Op) int64 {
	if op.Answered {
		return op.Return
	}
	return math.MaxInt64 / 2
}

// any reports an attempt of op on key begun between from and to (with 100 ms
// of slack either side).
func (a attemptBegins) any(key, op string, from, to int64) bool {
	const slack = int64(100 * time.Millisecond)
	for _, t := range a[key+" "+op] {
		if t >= from-slack && t <= to+slack {
			return true
		}
	}
	return false
}

// firstWords is a reason's first n words, numbers as N, so that like
// reasons count together.
func firstWords(s string, n int) string {
	f := strings.Fields(digits.ReplaceAllString(s, "N"))
	if len(f) > n {
		f = append(f[:n], "...")
	}
	return strings.Join(f, " ")
}

// AuditDiagnosis is catalog.auditDiagnosis on pool (for its test, in
// conformance: this package may not import meta, which migrates).
func AuditDiagnosis(ctx context.Context, pool *pgxpool.Pool, bucket, auditJSON string) string {
	return (&catalog{pool: pool}).auditDiagnosis(ctx, bucket, auditJSON)
}

// auditDiagnosis says, for an audit that kept failing, what the catalog
// holds about it: each finding's key's attempts (state, tries, how long
// still claimed, the last error) and the bucket's audit cursor, so that a
// failing campaign's report shows why the reconciler did not settle it.
func (c *catalog) auditDiagnosis(ctx context.Context, bucket, auditJSON string) string {
	var findings []struct {
		Key string `json:"key"`
	}
	if i := strings.Index(auditJSON, "["); i >= 0 {
		// (the tool's own error line may follow the JSON)
		_ = json.NewDecoder(strings.NewReader(auditJSON[i:])).Decode(&findings)
	}
	var b strings.Builder
	seen := map[string]bool{}
	for _, f := range findings {
		if seen[f.Key] || len(seen) == 5 {
			continue
		}
		seen[f.Key] = true
		rows, err := c.pool.Query(ctx, `SELECT attempt_id::text, op, state, coalesce(declared_size, -1), tries,
				coalesce(extract(epoch FROM claimed_until - clock_timestamp())::int, 0), coalesce(last_error, ''), coalesce(reason, ''),
				extract(epoch FROM clock_timestamp() - updated_at)::int, `+claimSessionState+`
			FROM attempts WHERE bucket = $1 AND key = $2 ORDER BY created_at`, bucket, f.Key)
		if err != nil {
			fmt.Fprintf(&b, "\n  %s: %v", f.Key, err)
			continue
		}
		fmt.Fprintf(&b, "\n  %s's attempts:", f.Key)
		for rows.Next() {
			var id, op, state, lastErr, reason, claimer string
			var size int64
			var tries, claimedFor, age int
			if err := rows.Scan(&id, &op, &state, &size, &tries, &claimedFor, &lastErr, &reason, &age, &claimer); err != nil {
				fmt.Fprintf(&b, " %v", err)
				break
			}
			fmt.Fprintf(&b, "\n    %s %s %s size %d, tries %d, claimed %d s more (%s), updated %d s ago, reason %q, last error %q",
				id, op, state, size, tries, claimedFor, claimer, age, reason, lastErr)
		}
		rows.Close()
	}
	var tries, claimedFor, passedAgo int
	var lastErr, claimer string
	if err := c.pool.QueryRow(ctx, `SELECT tries, coalesce(extract(epoch FROM claimed_until - clock_timestamp())::int, 0),
			coalesce(last_error, ''), coalesce(extract(epoch FROM clock_timestamp() - passed_at)::int, -1), `+claimSessionState+`
		FROM audit_cursors WHERE bucket = $1`, bucket).Scan(&tries, &claimedFor, &lastErr, &passedAgo, &claimer); err != nil {
		fmt.Fprintf(&b, "\n  the bucket's audit cursor: %v", err)
	} else {
		fmt.Fprintf(&b, "\n  the bucket's audit cursor: tries %d, claimed %d s more (%s), passed %d s ago, last error %q",
			tries, claimedFor, claimer, passedAgo, lastErr)
	}
	return b.String()
}

// claimSessionState says whose a work item's claim is: a back-off or rest
// (no session), a live gateway's, or an ended session's (claimable now).
const claimSessionState = `CASE WHEN claim_session IS NULL THEN 'no claiming session'
	WHEN EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = claim_session AND s.ended_at IS NULL
		AND s.expires_at > clock_timestamp()) THEN 'by a live session' ELSE 'by an ended session' END`
