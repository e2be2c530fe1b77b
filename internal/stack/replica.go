package stack

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// A PostgreSQL primary with a streaming standby, the database shape the
// cluster stack (docs/SCALING.md) runs fencegate on: the standby is a
// pg_basebackup of the primary and follows its WAL; with synchronous
// replication the primary acknowledges a commit only once the standby has it.

// PrimarySettings are the primary's replication settings. sync names the
// standby (its application_name) whose flush every commit waits for; ""
// leaves replication asynchronous. synchronous_commit=on is set either way:
// StartPostgres's throwaway clusters turn it off, which would also stop the
// wait for the standby.
func PrimarySettings(syncStandby string) []string {
	s := []string{"wal_level=replica", "max_wal_senders=10", "wal_keep_size=256MB", "synchronous_commit=on",
		"wal_sender_timeout=5s"}
	if syncStandby != "" {
		s = append(s, "synchronous_standby_names="+syncStandby)
	}
	return s
}

// StandbySettings are a standby's: it answers read-only queries while it
// follows (fencegate's multi-host URL skips it for target_session_attrs=
// read-write) and notices a dead primary quickly. It names no synchronous
// standby of its own (the primary's comes from its command line, which a
// base backup does not copy): once promoted, a primary waiting for a
// standby that does not exist would hang every commit. SetSyncStandby
// names one once it streams; it is not on the command line, which would
// win over ALTER SYSTEM.
func StandbySettings() []string {
	return []string{"hot_standby=on", "wal_receiver_timeout=5s", "wal_retrieve_retry_interval=500ms",
		"synchronous_commit=on"}
}

// StartStandby makes dir a streaming standby of primary, named name (its
// application_name, which synchronous_standby_names refers to), on first
// use with pg_basebackup -R, and starts it on port (0: a free one). The
// standby shares the primary's password (a base backup copies the roles).
func StartStandby(ctx context.Context, primary *Postgres, dir string, port int, name string, durable bool, settings ...string) (*Postgres, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		if err := baseBackup(ctx, primary, dir, name); err != nil {
			return nil, err
		}
	}
	return StartPostgres(ctx, dir, port, durable, append(StandbySettings(), settings...)...)
}

// baseBackup copies primary into dir (which must not hold a cluster) as a
// standby of it: standby.signal and a primary_conninfo naming it, written
// by fencegate rather than left to -R so the password and application_name
// are certain to be in it.
func baseBackup(ctx context.Context, primary *Postgres, dir, name string) error {
	bin, err := postgresBin("pg_basebackup")
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Dir(dir)); errors.Is(err, os.ErrNotExist) {
		if err := MakePrivateDir(filepath.Dir(dir)); err != nil {
			return err
		}
	}
	cred, err := serverCredential(dir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	if err := WritePrivateFile(PostgresPasswordFile(dir), []byte(primary.password+"\n")); err != nil {
		return err
	}
	if cred != nil {
		// The primary's log, written by this process into the cluster
		// folder, is this user's; pg_basebackup, run by the server's user,
		// copies every file there and must be able to read it.
		if err := os.Chown(filepath.Join(primary.Dir, "server.log"), int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.Port, name)
	cmd := exec.CommandContext(ctx, bin, "-D", dir, "-R", "-X", "stream", "-c", "fast", "-d", conninfo)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+primary.password)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_basebackup of port %d into %s: %v\n%s", primary.Port, dir, err, out)
	}
	auto := filepath.Join(dir, "postgresql.auto.conf")
	b, err := os.ReadFile(auto)
	if err != nil {
		return err
	}
	// The copy of the primary's own settings may name a synchronous
	// standby (SetSyncStandby): once promoted, this server must not wait
	// for one until told to.
	b = append(b, fmt.Sprintf("\n# fencegate: the primary this standby follows.\nprimary_conninfo = '%s password=%s'\nsynchronous_standby_names = ''\n", conninfo, primary.password)...)
	return writeServerFile(auto, b, cred)
}

// Promote ends recovery on a standby (pg_ctl promote) and waits until it
// accepts writes.
func (pg *Postgres) Promote(ctx context.Context) error {
	bin, err := postgresBin("pg_ctl")
	if err != nil {
		return err
	}
	cred, err := serverCredential(pg.Dir)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "promote", "-w", "-t", "60", "-D", pg.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl promote %s: %v\n%s", pg.Dir, err, out)
	}
	return nil
}

// SetSyncStandby makes this server's commits wait for the standby named
// name ("" : for none), with ALTER SYSTEM and a reload.
func (pg *Postgres) SetSyncStandby(ctx context.Context, name string) error {
	c, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = "+quoteLiteral(name)); err != nil {
		return err
	}
	_, err = c.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// WaitExited waits up to d for the server's process to end (after a crash
// or a stop) and reports whether it did.
func (pg *Postgres) WaitExited(d time.Duration) bool {
	select {
	case <-pg.proc.done:
		return true
	case <-time.After(d):
		return false
	}
}

// MultiHostURL is a connection string for database db naming every server
// in pgs, in order, with target_session_attrs=read-write: a client tries
// them in turn and keeps the one that accepts writes, so it follows a
// promoted standby. The password (the servers share it) is included.
func MultiHostURL(db string, pgs ...*Postgres) string {
	hosts := make([]string, len(pgs))
	for i, pg := range pgs {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(pg.Port)
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", pgs[0].password),
		Host: strings.Join(hosts, ","), Path: "/" + db, RawQuery: "sslmode=disable&target_session_attrs=read-write"}
	return u.String()
}
