package meta

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/lease"
)

// A measurement, not a check (FENCEGATE_MEASURE_COMMITS=1 runs it): the
// PostgreSQL CPU and write transactions one write's acquire and commit cost,
// on a durable cluster of its own, with 32 writers on their own keys; and the
// CPU the calls cost this process, the gateway's side of them (pgx, the
// batching, the waits and wake-ups).
func TestMeasureCommitCost(t *testing.T) {
	if os.Getenv("FENCEGATE_MEASURE_COMMITS") == "" {
		t.Skip("a measurement: set FENCEGATE_MEASURE_COMMITS=1")
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "measure-commits")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// FENCEGATE_MEASURE_STATEMENTS=1: every statement the writes run,
	// nested ones included (the protocol functions' and triggers'), with its
	// calls and time per write, from pg_stat_statements.
	statements := os.Getenv("FENCEGATE_MEASURE_STATEMENTS") != ""
	var settings []string
	if statements {
		settings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all"}
	}
	pg, err := stack.StartPostgres(ctx, dir+"/pg", 0, true, settings...)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	pool, err := Open(ctx, pg.URL("postgres"), PoolConfig{MaxConns: 40})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	c := &Catalog{Pool: pool}
	// The notification fan-out trigger's share (docs/NOTIFICATIONS.md):
	// FENCEGATE_MEASURE_NOTIFY=off disables it, =config gives bucket b a
	// configuration, so every commit also queues an event.
	switch os.Getenv("FENCEGATE_MEASURE_NOTIFY") {
	case "off":
		if _, err := pool.Exec(ctx, `ALTER TABLE outbox DISABLE TRIGGER outbox_notify_fanout`); err != nil {
			t.Fatal(err)
		}
	case "config":
		ts := &Targets{Pool: pool}
		if _, err := ts.Add(ctx, Target{Name: "measure", Kind: TargetWebhook, URL: "http://127.0.0.1:1/"}); err != nil {
			t.Fatal(err)
		}
		if err := ts.SetBucketNotifications(ctx, "b", []NotificationRule{{ID: "all", Kind: "queue", ARN: TargetARN("measure", TargetWebhook),
			Events: []string{"s3:ObjectCreated:*"}}}); err != nil {
			t.Fatal(err)
		}
	}
	// A schema variant to compare (an index dropped, a fillfactor), as SQL.
	if v := os.Getenv("FENCEGATE_MEASURE_SQL"); v != "" {
		if _, err := pool.Exec(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if v := os.Getenv("FENCEGATE_MEASURE_SET"); v != "" {
		for _, set := range strings.Split(v, ";") {
			if _, err := pool.Exec(ctx, "ALTER SYSTEM SET "+set); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := pool.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
		pool.Reset()
	}
	if statements {
		if _, err := pool.Exec(ctx, `CREATE EXTENSION pg_stat_statements`); err != nil {
			t.Fatal(err)
		}
	}
	sid, err := c.OpenSession(ctx, "measure", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dur := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FENCEGATE_MEASURE_FOR")); err == nil {
		dur = d
	}
	for _, run := range []struct {
		single  bool
		workers int
	}{{true, 1}, {false, 1}, {true, 32}, {false, 32}, {true, 32}, {false, 32}} {
		c.SingleCalls = run.single
		workers := run.workers
		calls0, batches0, _ := c.BatchStats()
		var n atomic.Int64
		rows0, wal0 := rowVersions(t, pool)
		if statements {
			if _, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
				t.Fatal(err)
			}
		}
		cpu0, tx0, self0 := groupCPU(pg.Pid()), writeTxns(t, c), selfCPU()
		stop := time.Now().Add(dur)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(stop); i++ {
					id := lease.NewID()
					key := fmt.Sprintf("k%d", w)
					if _, err := c.Acquire(ctx, lease.AcquireParams{Bucket: "b", Key: key, TTL: time.Minute, Session: sid,
						Attempt: lease.Attempt{ID: id, Op: "put", Gateway: "measure", DeclaredSize: 65536}}); err != nil {
						t.Error(err)
						return
					}
					if _, err := c.Commit(ctx, lease.CommitParams{Bucket: "b", Key: key, Holder: id, Settled: id, SettledState: lease.StateCommitted,
						Entry: lease.Entry{ETag: `"e"`, Size: 65536, Origin: lease.OriginFencegate, AttemptID: id}, Release: true}); err != nil {
						t.Error(err)
						return
					}
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		time.Sleep(200 * time.Millisecond) // the outbox wake-ups
		ops := float64(n.Load())
		if statements && !run.single && workers > 1 {
			logStatements(t, pool, ops)
		}
		cpu := groupCPU(pg.Pid()) - cpu0
		self := selfCPU() - self0
		calls, batches, _ := c.BatchStats()
		mode := "each call alone"
		if !c.SingleCalls {
			mode = fmt.Sprintf("batched (%.1f calls/batch)", float64(calls-calls0)/float64(max(1, batches-batches0)))
		}
		t.Logf("%2d writers, %s: %.0f writes/s, PostgreSQL CPU %.3f ms/write, write transactions %.2f/write, this process (the gateway's side of the calls) %.3f ms/write",
			workers, mode, ops/dur.Seconds(), 1000*cpu/ops, float64(writeTxns(t, c)-tx0)/ops, 1000*self/ops)
		rows1, wal1 := rowVersions(t, pool)
		var per, probes []string
		for _, tb := range []string{"leases", "attempts", "generations", "catalog", "outbox"} {
			d := [3]int64{rows1[tb][0] - rows0[tb][0], rows1[tb][1] - rows0[tb][1], rows1[tb][2] - rows0[tb][2]}
			per = append(per, fmt.Sprintf("%s ins %.2f upd %.2f (HOT %.2f)", tb, float64(d[0])/ops, float64(d[1])/ops, float64(d[2])/ops))
		}
		// Index scans per write, every table the write path reads (its
		// statements and their triggers'): a count, steady where CPU time
		// swings with the machine.
		var scans int64
		for tb := range rows1 {
			if d := rows1[tb][3] - rows0[tb][3]; d > 0 {
				scans += d
				probes = append(probes, fmt.Sprintf("%s %.2f", tb, float64(d)/ops))
			}
		}
		sort.Strings(probes)
		t.Logf("   per write: WAL %.0f bytes; %s", float64(wal1-wal0)/ops, strings.Join(per, "; "))
		t.Logf("   per write: %.2f index scans (%s)", float64(scans)/ops, strings.Join(probes, ", "))
	}
}

// logStatements logs the statements run since pg_stat_statements_reset,
// most called first, per write.
func logStatements(t *testing.T, pool *pgxpool.Pool, ops float64) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT calls, total_exec_time, regexp_replace(left(query, 110), '\s+', ' ', 'g')
		FROM pg_stat_statements WHERE calls >= $1 ORDER BY calls DESC, total_exec_time DESC`, int64(ops/2))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var calls int64
		var total float64
		var q string
		if err := rows.Scan(&calls, &total, &q); err != nil {
			t.Fatal(err)
		}
		t.Logf("     %5.2f calls %6.1f us per write: %s", float64(calls)/ops, 1000*total/ops, q)
	}
}

// rowVersions is, per table, the rows inserted, updated and updated HOT
// (pg_stat_user_tables), and the WAL position in bytes. The pool's
// connections are closed first: a backend reports its counts as it exits.
func rowVersions(t *testing.T, pool *pgxpool.Pool) (map[string][4]int64, int64) {
	t.Helper()
	ctx := context.Background()
	pool.Reset()
	time.Sleep(500 * time.Millisecond)
	rows, err := pool.Query(ctx, `SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, coalesce(idx_scan, 0) FROM pg_stat_user_tables`)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][4]int64{}
	for rows.Next() {
		var name string
		var v [4]int64
		if err := rows.Scan(&name, &v[0], &v[1], &v[2], &v[3]); err != nil {
			t.Fatal(err)
		}
		m[name] = v
	}
	var wal int64
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&wal); err != nil {
		t.Fatal(err)
	}
	return m, wal
}

// selfCPU is this process's user and system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// groupCPU is the CPU seconds of the postmaster pgid and its children:
// user, system or both (FENCEGATE_MEASURE_CPU=user|system).
func groupCPU(pgid int) float64 {
	user, system := stack.GroupCPU(pgid)
	switch os.Getenv("FENCEGATE_MEASURE_CPU") {
	case "user":
		return user
	case "system":
		return system
	}
	return user + system
}
