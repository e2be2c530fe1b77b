package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/jackc/pgx/v5"
)

// -pg-statements prints what PostgreSQL ran since the reset, per operation,
// nested statements marked: a function called 4 times per operation over 5
// operations, whose body runs one statement, shows as 4.00 calls/op at the
// top and 4.00 nested; what ran before the reset does not show.
func TestPrintStatementsPerOperation(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fencebench-statements")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755) // PostgreSQL may run as another user
	pg, err := stack.StartPostgres(ctx, dir+"/pg", 0, false, statementSettings...)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	dbURL, err := stack.CreateDatabase(ctx, pg.URL("postgres"), "statements")
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	s := &benchStack{db: db, statements: true}
	if err := s.createStatementsView(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE counted (n int)`,
		`CREATE FUNCTION count_one() RETURNS void LANGUAGE plpgsql AS $$ BEGIN INSERT INTO counted VALUES (1); END $$`,
		`SELECT 'before the reset'`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.resetStatements(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := db.Exec(ctx, `SELECT count_one()`); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := s.printStatements(ctx, &out, "the test", 5); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		`(?m)^\s+4\.00\s+[0-9.]+\s+top\s+SELECT count_one\(\)$`,
		`(?m)^\s+4\.00\s+[0-9.]+\s+nested\s+INSERT INTO counted VALUES \(\$1\)$`,
		`the test \(5 operations\)`,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("no line matching %s in:\n%s", want, got)
		}
	}
	if regexp.MustCompile(`before the reset|pg_stat_statements`).MatchString(got) {
		t.Errorf("statements from before the reset, or the view's own, in:\n%s", got)
	}
}
