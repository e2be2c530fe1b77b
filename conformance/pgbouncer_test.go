package conformance

import (
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
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Behind PgBouncer (Debian's package, issue 33): fencegate keeps session
// state (statement_timeout at connect, pgx's prepared statements, LISTEN),
// so a pooler in transaction mode is refused at start with a message naming
// pool_mode; the same pooler in session mode is accepted.

// startPgBouncer runs pgbouncer with pool_mode mode in front of the test
// database and returns the database URL through it.
func startPgBouncer(t *testing.T, mode string, extra string) string {
	t.Helper()
	bin := requireBinary(t, "pgbouncer", "scripts/ensure-deps.sh --cluster")
	direct, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	password, _ := direct.User.Password()
	dir := sharedTempDir(t)
	port := freePort(t)
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = scram-sha-256
auth_file = %s
pool_mode = %s
default_pool_size = 4
max_client_conn = 200
%s
`, direct.Hostname(), direct.Port(), port, filepath.Join(dir, "userlist.txt"), mode, extra)
	files := map[string]string{"pgbouncer.ini": ini, "userlist.txt": fmt.Sprintf("%q %q\n", direct.User.Username(), password)}
	// PgBouncer refuses to run as root: as root it runs as postgres.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skip("running as root without a postgres user for PgBouncer")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if cred != nil {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer not listening:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	via := *direct
	via.Host = "127.0.0.1:" + strconv.Itoa(port)
	return via.String()
}

// serveVia starts `fencegate serve` on databaseURL and returns its start-up error.
func serveVia(t *testing.T, databaseURL string) error {
	t.Helper()
	packageKeys(t) // migrated
	g, err := stack.StartFencegate(t.Context(), stack.ServeConfig{
		Bin: fencegateBinary(t), DatabaseURL: databaseURL, ServerKey: serverKey, Store: testenv.Store(t),
		LogLevel: "warn", LogPath: filepath.Join(t.TempDir(), "gateway.log"), Ready: "/readyz",
	})
	if err == nil {
		g.Stop()
	}
	return err
}

func TestPgBouncerTransactionModeRefused(t *testing.T) {
	// As Debian ships it: fencegate's statement_timeout startup parameter
	// is refused by the pooler itself.
	err := serveVia(t, startPgBouncer(t, "transaction", ""))
	if err == nil || !strings.Contains(err.Error(), "pool_mode=session") {
		t.Fatalf("serve through PgBouncer (transaction mode, default startup parameters): %v; want a refusal naming pool_mode", err)
	}
	// With the parameter ignored, the connections get as far as queries:
	// the session check finds the pooler moving them between backends.
	err = serveVia(t, startPgBouncer(t, "transaction", "ignore_startup_parameters = statement_timeout"))
	if err == nil || !strings.Contains(err.Error(), "pool_mode=transaction") {
		t.Fatalf("serve through PgBouncer (transaction mode): %v; want a refusal naming pool_mode=transaction", err)
	}
	// Session mode keeps a client's backend: accepted.
	if err := serveVia(t, startPgBouncer(t, "session", "ignore_startup_parameters = statement_timeout")); err != nil {
		t.Fatalf("serve through PgBouncer in session mode: %v", err)
	}
}
