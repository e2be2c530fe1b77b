package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/stack"
)

// The two-transaction floor: a fenced write is an acquire transaction, the
// store's PUT and a commit transaction, so at one client it cannot beat two
// durable PostgreSQL transactions plus the store's own PUT. The benchmark
// measures the transactions on its PostgreSQL in every round (as a record of
// target floorTarget) and adds the direct PUT cell's p50.
const (
	floorTarget = "postgresql"
	opFloor     = "2TXN" // two durable one-row UPDATEs, one after the other, at one client
)

// floorCell is the floor record's cell: ops are pairs of transactions.
var floorCell = cell{opFloor, 0, 1}

// isFloor: r is the floor's, the two transactions or the store's fenced PUT
// (fencedput.go), not a cell of the targets.
func isFloor(r Record) bool { return r.Target == floorTarget || r.Target == storeTarget }

// floorSizes are the PUT sizes whose c=1 latency is shown against the floor.
var floorSizes = []int64{4 << 10, 64 << 10}

// needFloor: the floor is measured when a PUT cell at one client runs.
func needFloor(cs []cell) bool {
	return slices.ContainsFunc(cs, func(c cell) bool { return c.op == opPUT && c.conc == 1 })
}

// openFloor creates a scratch database on the benchmark's PostgreSQL (fencegate's
// own is left alone) with a one-row table, and connects to it with durable
// commits.
func openFloor(ctx context.Context, pg *stack.Postgres) (*pgx.Conn, error) {
	u, err := stack.CreateDatabase(ctx, pg.URL("postgres"), "fencebench_floor")
	if err != nil {
		return nil, err
	}
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return nil, err
	}
	for _, q := range []string{
		`SET synchronous_commit = on`,
		`CREATE TABLE floor (id int PRIMARY KEY, n bigint NOT NULL)`,
		`INSERT INTO floor VALUES (1, 0)`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			c.Close(ctx)
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	return c, nil
}

// runFloor times pairs of durable write transactions (each a one-statement
// UPDATE, committed and flushed before the answer) on conn for about dur.
// The sample's ops are pairs; its cpu and dbCPU are PostgreSQL's.
func runFloor(ctx context.Context, conn *pgx.Conn, pg procGroups, dur time.Duration) sample {
	var s sample
	var lats []time.Duration
	xid0, db0, client0 := pg.xids(), groupCPU(pg.db), selfCPU()
	start := time.Now()
	for n := 0; n == 0 || time.Since(start) < dur; n++ {
		if ctx.Err() != nil {
			break
		}
		t0 := time.Now()
		var err error
		for i := 0; i < 2 && err == nil; i++ {
			_, err = conn.Exec(ctx, `UPDATE floor SET n = n + 1 WHERE id = 1`)
		}
		if err != nil {
			s.fail(err)
			continue
		}
		lats = append(lats, time.Since(t0))
		s.ops++
	}
	s.elapsed = time.Since(start)
	s.dbCPU = groupCPU(pg.db) - db0
	s.cpu = s.dbCPU
	s.client = selfCPU() - client0
	s.dbWrites = pg.xids() - xid0
	s.setLatencies(lats)
	return s
}

// floorRow is one PUT size's c=1 latency beside its floor; a nil field was
// not measured.
type floorRow struct {
	size      int64
	txns      *stats // p50 ms of the two transactions
	txnsP99   float64
	store     *stats // the direct PUT's p50 ms
	fenced    *stats // the store's PUT as fencegate sends it, p50 ms: back to back
	fencedIdl *stats // and after a pause of the two transactions
	floor     *stats // their sum, round by round
	fgP50     *stats // fencegate's p50 and p99 ms
	fgP99     *stats
	overFloor *stats // fencegate's p50 over the floor, round by round
}

// floorRows pairs, round by round where the records have rounds (else their
// medians), the two transactions with the direct PUT at one client, and that
// floor with fencegate's p50.
func floorRows(recs []Record) []floorRow {
	var out []floorRow
	tx := findFloor(recs)
	for _, size := range floorSizes {
		row := floorRow{size: size}
		c := cell{opPUT, size, 1}
		d, f := findRec(recs, "direct", c), findRec(recs, "fencegate", c)
		if tx != nil {
			row.txns, row.txnsP99 = &stats{tx.P50Ms, tx.P50MsMin, tx.P50MsMax}, tx.P99Ms
		}
		if d != nil {
			row.store = &stats{d.P50Ms, d.P50MsMin, d.P50MsMax}
		}
		if r := findRec(recs, storeTarget, cell{opPUTFenced, size, 1}); r != nil {
			row.fenced = &stats{r.P50Ms, r.P50MsMin, r.P50MsMax}
		}
		if r := findRec(recs, storeTarget, cell{opPUTFencedIdle, size, 1}); r != nil {
			row.fencedIdl = &stats{r.P50Ms, r.P50MsMin, r.P50MsMax}
		}
		if f != nil {
			row.fgP50, row.fgP99 = &stats{f.P50Ms, f.P50MsMin, f.P50MsMax}, &stats{f.P99Ms, f.P99MsMin, f.P99MsMax}
		}
		if tx != nil && d != nil {
			sum := pairRounds(tx.P50MsRounds, d.P50MsRounds, tx.P50Ms, d.P50Ms, func(a, b float64) float64 { return a + b })
			row.floor = &sum
			if f != nil {
				var fl []float64
				if n := len(tx.P50MsRounds); n > 0 && len(d.P50MsRounds) == n {
					for i := range n {
						fl = append(fl, tx.P50MsRounds[i]+d.P50MsRounds[i])
					}
				}
				over := pairRounds(f.P50MsRounds, fl, f.P50Ms, sum.med, func(a, b float64) float64 {
					if b <= 0 {
						return 0
					}
					return a / b
				})
				row.overFloor = &over
			}
		}
		out = append(out, row)
	}
	return out
}

// pairRounds summarises op(a[i], b[i]) over the rounds, or when either has no
// rounds (or they differ in number), op of the medians am and bm.
func pairRounds(a, b []float64, am, bm float64, op func(a, b float64) float64) stats {
	if len(a) == 0 || len(a) != len(b) {
		v := op(am, bm)
		return stats{v, v, v}
	}
	var v []float64
	for i := range a {
		v = append(v, op(a[i], b[i]))
	}
	return summarize(v)
}

func findFloor(recs []Record) *Record {
	for i := range recs {
		if recs[i].Target == floorTarget {
			return &recs[i]
		}
	}
	return nil
}

// cells are the row's columns, as floorHeader names them.
func (r floorRow) cells() []string {
	str := func(s *stats, unit string) string {
		if s == nil {
			return "not measured"
		}
		return s.String() + unit
	}
	txns := str(r.txns, "")
	if r.txns != nil {
		txns += fmt.Sprintf(" (p99 %s)", num(r.txnsP99))
	}
	return []string{"PUT " + sizeLabel(r.size) + " c=1", txns, str(r.store, ""), str(r.floor, ""), str(r.fenced, ""), str(r.fencedIdl, ""),
		str(r.fgP50, ""), str(r.fgP99, ""), str(r.overFloor, "x")}
}

// floorHeader names floorRow.cells' columns.
var floorHeader = []string{"cell", "2 PostgreSQL txns p50 ms", "direct PUT p50 ms", "floor p50 ms (sum)",
	"store, fenced PUT p50 ms", "the same after the 2 txns' pause p50 ms", "fencegate p50 ms", "fencegate p99 ms", "fencegate p50 / floor"}
