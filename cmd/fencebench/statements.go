package main

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// -pg-statements: the benchmark's PostgreSQL loads pg_stat_statements, and
// every fencegate run of a cell prints the statements it made PostgreSQL
// run, nested ones included (the write protocol's functions and their
// triggers), per operation. Issue 35 asks each change to PostgreSQL's write
// path to be proven with it, in the load the benchmark makes rather than in
// a test's; docs/COST.md has what it showed. Tracking every statement costs
// PostgreSQL CPU, so such a run measures only the cells -cells names and
// writes no results.

// statementSettings load and configure pg_stat_statements at PostgreSQL's
// start (it must be preloaded).
var statementSettings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all"}

// statementsShown bounds the statements printed per run.
const statementsShown = 25

// createStatementsView makes the extension's view readable in the
// benchmark's database.
func (s *benchStack) createStatementsView(ctx context.Context) error {
	_, err := s.db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return err
}

// resetStatements forgets what PostgreSQL ran before the next run.
func (s *benchStack) resetStatements(ctx context.Context) error {
	_, err := s.db.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	return err
}

// printStatements writes the statements run in the benchmark's database
// since resetStatements, most time first: calls and execution time per
// operation (ops), each marked top-level (sent by fencegate) or nested
// (run inside a function or trigger, whose time is part of its caller's).
func (s *benchStack) printStatements(ctx context.Context, w io.Writer, title string, ops int) error {
	if ops == 0 {
		return nil
	}
	rows, err := s.db.Query(ctx, `SELECT calls, total_exec_time, toplevel, query FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query NOT LIKE '%pg_stat_statements%'
		ORDER BY total_exec_time DESC LIMIT $1`, statementsShown)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(w, "  PostgreSQL statements, %s (%d operations): calls/op, exec us/op, top-level or nested\n", title, ops)
	for rows.Next() {
		var calls int64
		var total float64
		var top bool
		var query string
		if err := rows.Scan(&calls, &total, &top, &query); err != nil {
			return err
		}
		where := "nested"
		if top {
			where = "top"
		}
		fmt.Fprintf(w, "  %6.2f %8.1f  %-6s %s\n", float64(calls)/float64(ops), 1000*total/float64(ops), where, oneLine(query, 110))
	}
	return rows.Err()
}

// oneLine folds a statement's whitespace and cuts it to n bytes.
func oneLine(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > n {
		q = q[:n]
	}
	return q
}
