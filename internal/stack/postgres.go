// Package stack starts the real parts fencegate runs against: a private
// PostgreSQL cluster and S3 stores (SeaweedFS, versitygw). Tests, `fencegate dev`
// (behind `make run` and `make test`) and the benchmark all use this one piece of
// code, so what the tests exercise is what a developer runs.
package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// Postgres is a private PostgreSQL cluster run as a child process.
type Postgres struct {
	Dir  string // data folder
	Port int
	proc *proc
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

// StartPostgres initialises dir as a cluster if it is empty and starts the server on
// a free loopback port (or port, if non-zero). durable=false turns fsync off, for
// throwaway test clusters.
func StartPostgres(ctx context.Context, dir string, port int, durable bool) (*Postgres, error) {
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
	cred, err := serverCredential(dir)
	if err != nil {
		return nil, err
	}
	// Parents stay enterable for the server's user; the cluster folder is its own.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
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
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		cmd := exec.CommandContext(ctx, initdb, "-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("initdb %s: %v\n%s", dir, err, out)
		}
	}
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	args := []string{"-D", dir, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + dir, "-c", "max_connections=300", "-c", "shared_buffers=128MB"}
	if !durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	p, err := startProc("postgres", filepath.Join(dir, "server.log"), cred, os.Environ(), postgres, args...)
	if err != nil {
		return nil, err
	}
	pg := &Postgres{Dir: dir, Port: port, proc: p}
	if err := pg.waitReady(ctx, 60*time.Second); err != nil {
		pg.Stop()
		return nil, err
	}
	return pg, nil
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
		case err := <-pg.proc.exited:
			pg.proc.exited <- err
			return fmt.Errorf("postgres exited during start-up (%s): %s", errString(err), pg.proc.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d not ready after %s: %v", pg.Port, limit, err)
		}
	}
}

// URL is a connection string for database db on this cluster.
func (pg *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.Port, db)
}

// Stop shuts the server down (fast shutdown, then kill) and waits for it.
func (pg *Postgres) Stop() {
	if pg != nil {
		pg.proc.stop(syscall.SIGINT, 30*time.Second)
	}
}

// serverCredential: PostgreSQL refuses to run as root, so as root the cluster runs
// as the `postgres` user (or `nobody`), who must be able to reach dir.
func serverCredential(dir string) (*syscall.Credential, error) {
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
	for p := filepath.Dir(dir); p != "/"; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			continue // not created yet
		}
		if st.Mode().Perm()&0o001 == 0 {
			return nil, fmt.Errorf("PostgreSQL runs as user %s here (root is refused), who cannot enter %s: choose a data folder outside it (FENCEGATE_DEV_DIR) or `chmod o+x %s`", u.Username, p, p)
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
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

// FreePort asks the kernel for a free loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
