package stack

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// privateTestDir is a folder for a cluster, made like `make run`'s.
func privateTestDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fencegate-stack-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := MakePrivateDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func startTestPostgres(t *testing.T, dir string) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := StartPostgres(ctx, dir, 0, false)
	if err != nil {
		if err == ErrNoPostgres {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	return pg
}

// connectAs tries a login to pg's postgres database with password (none if
// empty) over TCP.
func connectAs(pg *Postgres, password string) error {
	u, _ := url.Parse(pg.URL("postgres"))
	if password == "" {
		u.User = url.User("postgres")
	} else {
		u.User = url.UserPassword("postgres", password)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u.String())
	if err == nil {
		c.Close(ctx)
	}
	return err
}

func TestPostgresNeedsItsPassword(t *testing.T) {
	pg := startTestPostgres(t, filepath.Join(privateTestDir(t), "pg"))
	if err := connectAs(pg, ""); err == nil || !strings.Contains(err.Error(), "password") {
		t.Fatalf("login without a password: %v, want a password failure", err)
	}
	if err := connectAs(pg, "not-the-password"); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("login with a wrong password: %v, want a password failure", err)
	}
	if err := connectAs(pg, pg.password); err != nil {
		t.Fatalf("login with the password: %v", err)
	}
	// The role creates the test packages' databases.
	if _, err := CreateDatabase(context.Background(), pg.URL("postgres"), "made_here"); err != nil {
		t.Fatalf("create a database: %v", err)
	}
	st, err := os.Stat(PostgresPasswordFile(pg.Dir))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("password file: %v, mode %v, want 0600", err, st.Mode().Perm())
	}
	hba, _ := os.ReadFile(filepath.Join(pg.Dir, "pg_hba.conf"))
	if strings.Contains(string(hba), "trust") {
		t.Fatalf("pg_hba.conf trusts someone:\n%s", hba)
	}
}

// A cluster made by an older fencegate (trust authentication, no password file)
// gets a password at its next start, and keeps its data.
func TestPostgresUpgradesTrustCluster(t *testing.T) {
	initdb, err := postgresBin("initdb")
	if err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(privateTestDir(t), "pg")
	cred, err := serverCredential(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(initdb, "-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}

	pg := startTestPostgres(t, dir)
	if err := connectAs(pg, ""); err == nil {
		t.Fatal("the upgraded cluster still lets a login in without a password")
	}
	if err := connectAs(pg, pg.password); err != nil {
		t.Fatalf("login with the new password: %v", err)
	}
	if _, err := CreateDatabase(context.Background(), pg.URL("postgres"), "kept"); err != nil {
		t.Fatal(err)
	}
	pg.Stop()

	// The second start reuses the password it kept.
	again := startTestPostgres(t, dir)
	if again.password != pg.password {
		t.Fatal("the password changed between starts")
	}
	if err := connectAs(again, again.password); err != nil {
		t.Fatalf("login after a restart: %v", err)
	}
}

func TestMakePrivateDirTightensAnOldFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "old")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := MakePrivateDir(dir); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(dir)
	if st.Mode().Perm()&0o067 != 0 {
		t.Fatalf("mode %v: others or the group can list or write", st.Mode().Perm())
	}
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WritePrivateFile(f, []byte("new")); err != nil {
		t.Fatal(err)
	}
	st, _ = os.Stat(f)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("rewritten file has mode %v, want 0600", st.Mode().Perm())
	}
}
