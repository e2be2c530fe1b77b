package meta

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// schemaFile is the schema after every migration, generated: the migrations
// restate whole function bodies at each change, so this is where a reader
// finds the current ones once.
const schemaFile = "schema.sql"

const schemaHeader = `-- The schema after every migration in meta/migrations: pg_dump --schema-only
-- of a freshly migrated database, without owners, privileges and the dump's
-- session settings. Generated; do not edit. ` + "`make schema`" + ` regenerates it and
-- ` + "`make lint`" + ` (TestSchemaFileIsCurrent) refuses one that is out of date.
`

// TestSchemaFileIsCurrent migrates a fresh database, dumps its schema and
// compares it with meta/schema.sql; with FENCEGATE_UPDATE_SCHEMA=1 (`make
// schema`) it writes the file instead.
func TestSchemaFileIsCurrent(t *testing.T) {
	ctx := context.Background()
	dbURL, err := stack.CreateDatabase(ctx, testenv.DatabaseURL(t), "schema_dump")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := Open(ctx, dbURL, PoolConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := dumpSchema(t, dbURL)
	if os.Getenv("FENCEGATE_UPDATE_SCHEMA") == "1" {
		if err := os.WriteFile(schemaFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatalf("%v: run `make schema`", err)
	}
	if got != string(want) {
		t.Fatalf("meta/%s is not the schema the migrations make: run `make schema` and commit it; first difference:\n%s",
			schemaFile, firstDifference(string(want), got))
	}
}

// dumpSchema is pg_dump --schema-only of the database, normalised so that it
// depends on the migrations alone: no owners or grants, none of the session
// settings and version lines that differ between PostgreSQL releases, no
// \restrict lines (whose key is random), single blank lines.
func dumpSchema(t *testing.T, dbURL string) string {
	t.Helper()
	pgDump, err := stack.PostgresTool("pg_dump")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	// The password goes by the environment, not the command line.
	pw, _ := u.User.Password()
	cmd := exec.Command(pgDump, "--schema-only", "--no-owner", "--no-privileges", "--no-comments",
		"--host", u.Hostname(), "--port", u.Port(), "--username", u.User.Username(), "--dbname", strings.TrimPrefix(u.Path, "/"))
	cmd.Env = append(os.Environ(), "PGPASSWORD="+pw, "PGSSLMODE=disable")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, stderr.Bytes())
	}
	return normaliseDump(string(out))
}

func normaliseDump(dump string) string {
	var b strings.Builder
	b.WriteString(schemaHeader)
	blank := false
	inBody := false // inside a $$-quoted function body, copied as it is
	for _, line := range strings.Split(dump, "\n") {
		line = strings.TrimRight(line, " \t\r")
		dropped := !inBody && (line == "--" || strings.HasPrefix(line, "-- Name: ") ||
			strings.HasPrefix(line, "-- PostgreSQL database dump") || strings.HasPrefix(line, "-- Dumped ") ||
			strings.HasPrefix(line, `\restrict`) || strings.HasPrefix(line, `\unrestrict`) ||
			strings.HasPrefix(line, "SET ") || strings.HasPrefix(line, "SELECT pg_catalog.set_config("))
		if strings.Count(line, "$$")%2 == 1 {
			inBody = !inBody
		}
		switch {
		case dropped:
			continue
		case line == "" && !inBody:
			if blank {
				continue
			}
			blank = true
		default:
			blank = false
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// firstDifference shows the first line where want and got part, with a few
// lines of context.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	from := max(0, i-3)
	var b strings.Builder
	for j := from; j < i+3; j++ {
		if j < len(w) {
			b.WriteString("  file:     " + w[j] + "\n")
		}
		if j < len(g) {
			b.WriteString("  migrated: " + g[j] + "\n")
		}
	}
	return b.String()
}
