// Package stack starts the real parts fencegate runs against: a private
// PostgreSQL cluster and S3 stores (SeaweedFS, versitygw). Tests, `fencegate dev`
// (behind `make run` and `make test`) and the benchmark all use this one piece of
// code, so what the tests exercise is what a developer runs.
package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a private PostgreSQL cluster run as a child process. Its only role,
// postgres, logs in with a password (SCRAM) from 127.0.0.1 or a socket in the
// cluster's own 0700 folder: other users of the machine cannot connect.
type Postgres struct {
	Dir      string // data folder
	Port     int
	password string
	proc     *proc
}

// ErrNoPostgres is returned when the machine has no PostgreSQL server binaries.
var ErrNoPostgres = errors.New("PostgreSQL server binaries (initdb, postgres) not found on PATH or under /usr/lib/postgresql/*/bin: install them, e.g. `apt-get install postgresql-15`")

// postgresBin finds a PostgreSQL server binary on PATH or in Debian's versioned
// folders, newest version first.
func postgresBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) == 0 {
		return "", ErrNoPostgres
	}
	best, bestV := "", -1
	for _, m := range matches {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(m))))
		if v > bestV {
			best, bestV = m, v
		}
	}
	return best, nil
}

// PostgresTool finds one of PostgreSQL's client programs (pg_dump) the way
// the server is found: on PATH, else the newest of Debian's versioned folders.
func PostgresTool(name string) (string, error) { return postgresBin(name) }

// PostgresPasswordFile is where the password of the cluster in dir is kept:
// beside the cluster folder, not in it, so that it stays the starting user's
// (the cluster folder belongs to the server's user) and initdb finds its
// folder empty.
func PostgresPasswordFile(dir string) string {
	return filepath.Clean(dir) + ".password"
}

// pgHBA is the whole client authentication file: a password, checked with SCRAM,
// on every connection, local or TCP, and nothing but loopback over TCP.
const pgHBA = `# Written by fencegate at every start: every connection needs the password.
local   all             all                                     scram-sha-256
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     scram-sha-256
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256
`

// StartPostgres initialises dir as a cluster if it is empty and starts the server on
// a free loopback port (or port, if non-zero). durable=false turns fsync off, for
// throwaway test clusters. The password is generated with the cluster and kept in
// PostgresPasswordFile(dir); a cluster of an older version, which trusted every
// local connection, gets one at its next start. settings ("name=value") are
// passed as -c after fencegate's own, so they win (the cluster stack's
// replication settings).
func StartPostgres(ctx context.Context, dir string, port int, durable bool, settings ...string) (*Postgres, error) {
	initdb, err := postgresBin("initdb")
	if err != nil {
		return nil, err
	}
	postgres, err := postgresBin("postgres")
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	// A parent this call creates is private too; an existing one (perhaps /tmp)
	// is the caller's to choose.
	if _, err := os.Stat(filepath.Dir(dir)); errors.Is(err, os.ErrNotExist) {
		if err := MakePrivateDir(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	}
	cred, err := serverCredential(dir)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	password, created, err := loadOrCreateSecret(PostgresPasswordFile(dir))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		if err := runInitdb(ctx, initdb, dir, cred, password); err != nil {
			return nil, err
		}
	} else if hba, _ := os.ReadFile(filepath.Join(dir, "pg_hba.conf")); created || string(hba) != pgHBA {
		// A cluster from before passwords (trust authentication), or one whose
		// upgrade stopped half-way: set the password before the file demands it.
		if err := setPasswordSingleUser(ctx, postgres, dir, cred, password); err != nil {
			return nil, err
		}
	}
	if err := writeServerFile(filepath.Join(dir, "pg_hba.conf"), []byte(pgHBA), cred); err != nil {
		return nil, err
	}
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	args := []string{"-D", dir, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + dir, "-c", "unix_socket_permissions=0700",
		"-c", "password_encryption=scram-sha-256",
		"-c", "max_connections=300", "-c", "shared_buffers=128MB"}
	if !durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	p, err := startProc("postgres", filepath.Join(dir, "server.log"), cred, os.Environ(), postgres, args...)
	if err != nil {
		return nil, err
	}
	pg := &Postgres{Dir: dir, Port: port, password: password, proc: p}
	if err := pg.waitReady(ctx, 60*time.Second); err != nil {
		pg.Stop()
		return nil, err
	}
	return pg, nil
}

// runInitdb creates the cluster with SCRAM authentication and the postgres role's
// password. initdb reads the password from a file, which must be readable by
// the server's user: a short-lived copy owned by that user, in the private
// parent folder.
func runInitdb(ctx context.Context, initdb, dir string, cred *syscall.Credential, password string) error {
	f, err := os.CreateTemp(filepath.Dir(dir), ".pwfile-*")
	if err != nil {
		return err
	}
	pwfile := f.Name()
	defer os.Remove(pwfile)
	_, err = f.WriteString(password + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && cred != nil {
		err = os.Chown(pwfile, int(cred.Uid), int(cred.Gid))
	}
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, initdb, "-D", dir, "-U", "postgres", "--auth=scram-sha-256", "--pwfile="+pwfile,
		"-E", "UTF8", "--no-instructions")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %v\n%s", dir, err, out)
	}
	return nil
}

// setPasswordSingleUser sets the postgres role's password with the server in
// single-user mode: no listener is open, so the cluster is never reachable with
// its old trust rules and a password set. The password goes in on stdin and is
// blotted out of any output quoted in an error.
func setPasswordSingleUser(ctx context.Context, postgres, dir string, cred *syscall.Credential, password string) error {
	cmd := exec.CommandContext(ctx, postgres, "--single", "-D", dir, "-c", "password_encryption=scram-sha-256", "postgres")
	cmd.Stdin = strings.NewReader("ALTER ROLE postgres WITH LOGIN SUPERUSER PASSWORD '" + password + "';\n")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err == nil && bytes.Contains(out, []byte("ERROR:")) {
		err = errors.New("the statement failed")
	}
	if err != nil {
		return fmt.Errorf("set a password on the existing cluster in %s (made by an older fencegate, without one): %v\n%s\n"+
			"starting over with `rm -rf %s` also works (its data is lost)",
			dir, err, strings.ReplaceAll(string(out), password, "<password>"), filepath.Dir(dir))
	}
	return nil
}

// writeServerFile writes a file the server reads, in the cluster folder: owned by
// the server's user and 0600, as PostgreSQL keeps its own.
func writeServerFile(path string, data []byte, cred *syscall.Credential) error {
	if err := WritePrivateFile(path, data); err != nil {
		return err
	}
	if cred != nil {
		return os.Chown(path, int(cred.Uid), int(cred.Gid))
	}
	return nil
}

func (pg *Postgres) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := pgx.Connect(ctx, pg.URL("postgres"))
		if err == nil {
			c.Close(ctx)
			return nil
		}
		select {
		case <-pg.proc.done:
			return fmt.Errorf("postgres exited during start-up (%s): %s", errString(pg.proc.err), pg.proc.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d not ready after %s: %v", pg.Port, limit, err)
		}
	}
}

// URL is a connection string for database db on this cluster, password
// included: a secret, never to be logged.
func (pg *Postgres) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", pg.password),
		Host: "127.0.0.1:" + strconv.Itoa(pg.Port), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Stop shuts the server down (fast shutdown, then kill) and waits for it.
func (pg *Postgres) Stop() {
	if pg != nil {
		pg.proc.stop(syscall.SIGINT, 30*time.Second)
	}
}

// Crash kills the server's whole process group at once (SIGKILL), as a power
// cut would; StartPostgres with the same folder and port recovers it.
func (pg *Postgres) Crash() {
	if pg != nil {
		pg.proc.stop(syscall.SIGKILL, 10*time.Second)
	}
}

// postgresUser: PostgreSQL refuses to run as root, so as root the cluster runs as
// the `postgres` user (or `nobody`); nil otherwise.
func postgresUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var u *user.User
	var err error
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		return nil, errors.New("running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// serverCredential is the user the cluster in dir runs as (nil: this process's),
// who must be able to reach dir: through folders others may enter, or, for
// MakePrivateDir's folders, through its group.
func serverCredential(dir string) (*syscall.Credential, error) {
	cred, err := postgresUser()
	if cred == nil || err != nil {
		return cred, err
	}
	for p := filepath.Dir(dir); p != "/"; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			continue // not created yet
		}
		perm := st.Mode().Perm()
		sys := st.Sys().(*syscall.Stat_t)
		if perm&0o001 == 0 && (perm&0o010 == 0 || sys.Gid != cred.Gid) && (perm&0o100 == 0 || sys.Uid != cred.Uid) {
			return nil, fmt.Errorf("PostgreSQL runs as uid %d here (root is refused), who cannot enter %s: choose a data folder outside it (FENCEGATE_DEV_DIR) or `chmod o+x %s`", cred.Uid, p, p)
		}
	}
	return cred, nil
}

// CreateDatabase creates a fresh database named name (dropping any old one) on the
// server behind adminURL and returns its URL.
func CreateDatabase(ctx context.Context, adminURL, name string) (string, error) {
	c, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := c.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", err
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Pid is the postmaster's process id; the server's processes share its
// process group.
func (pg *Postgres) Pid() int { return pg.proc.Pid() }
