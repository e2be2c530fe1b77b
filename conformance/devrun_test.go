package conformance

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/sysmon"
)

// `make run` is `fencegate dev run`: it must come up with a health endpoint and
// an env file, and leave no process behind after SIGTERM.
func TestDevRunComesUpAndStopsClean(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole stack")
	}
	bin := fencegateBinary(t)
	dir := sharedTempDir(t)
	cmd := exec.Command(bin, "dev", "run", "--dir", dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
	}()

	envPath := filepath.Join(dir, "env")
	env := waitEnvFile(t, envPath, done, &out)
	for _, name := range []string{"FENCEGATE_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"} {
		if env[name] == "" {
			t.Fatalf("%s lacks %s:\n%v", envPath, name, env)
		}
	}
	for _, u := range []string{env["FENCEGATE_ADMIN_ENDPOINT"] + "/healthz", env["FENCEGATE_ADMIN_ENDPOINT"] + "/readyz"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", u, resp.Status)
		}
	}
	// The env file's key works against the env file's endpoint.
	ep := stack.Endpoint{URL: env["FENCEGATE_ENDPOINT"], AccessKey: env["AWS_ACCESS_KEY_ID"], SecretKey: env["AWS_SECRET_ACCESS_KEY"], Region: env["AWS_DEFAULT_REGION"]}
	if _, err := ep.S3Client().ListBuckets(context.Background(), &s3.ListBucketsInput{}); err != nil {
		t.Fatalf("ListBuckets with the env file's key: %v", err)
	}
	// So does the store's own key against the store (writes around the gateway).
	store := stack.Endpoint{URL: env["FENCEGATE_STORE_ENDPOINT"], AccessKey: env["FENCEGATE_STORE_ACCESS_KEY_ID"], SecretKey: env["FENCEGATE_STORE_SECRET_ACCESS_KEY"], Region: env["AWS_DEFAULT_REGION"]}
	if _, err := store.S3Client().ListBuckets(context.Background(), &s3.ListBucketsInput{}); err != nil {
		t.Fatalf("ListBuckets at the store with the env file's store key: %v", err)
	}
	// A second `make run` on the same folder, the stack still up: it is told
	// which process serves the folder and how to stop it, starts nothing, and
	// leaves the running stack and its env file as they were (before: its
	// PostgreSQL failed on the cluster's lock file and it printed the server
	// log of every earlier run).
	envBefore, err := os.ReadFile(envPath)
	if err != nil {
		t.Fatal(err)
	}
	second := exec.Command(bin, "dev", "run", "--dir", dir)
	secondOut, err := runWithin(second, 30*time.Second)
	if err == nil {
		t.Fatalf("a second dev run on %s succeeded:\n%s", dir, secondOut)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	if !strings.Contains(secondOut, "pid "+pid) || !strings.Contains(secondOut, "kill -INT "+pid) || strings.Contains(secondOut, "starting PostgreSQL") {
		t.Fatalf("a second dev run on %s, the first being pid %s, said:\n%s", dir, pid, secondOut)
	}
	if envAfter, _ := os.ReadFile(envPath); !bytes.Equal(envAfter, envBefore) {
		t.Fatalf("a second dev run changed %s:\n%s\nwas:\n%s", envPath, envAfter, envBefore)
	}
	if _, err := ep.S3Client().ListBuckets(context.Background(), &s3.ListBucketsInput{}); err != nil {
		t.Fatalf("ListBuckets after a second dev run was refused: %v", err)
	}
	// The gateway runs with the runtime monitor's setting (internal/sysmon),
	// re-executed in place (the same pid); PostgreSQL and the store, which it
	// started after that, run with the environment it was given.
	if g := initialGODEBUG(cmd.Process.Pid); !strings.Contains(g, sysmon.Setting) {
		t.Fatalf("dev run started with GODEBUG %q, want it to carry %s", g, sysmon.Setting)
	}
	children := processesMentioning(dir)
	if len(children) == 0 {
		t.Fatal("no process of the stack mentions its folder")
	}
	for _, c := range children {
		pid, _, _ := strings.Cut(c, ": ")
		if n, _ := strconv.Atoi(pid); n != cmd.Process.Pid && strings.Contains(initialGODEBUG(n), sysmon.Setting) {
			t.Fatalf("%s was started with the gateway's runtime setting", c)
		}
	}
	if !strings.Contains(out.String(), "aws --endpoint-url") {
		t.Fatalf("no ready-to-paste aws command in the output:\n%s", out.String())
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("dev run did not stop within 60 s of SIGTERM:\n%s", out.String())
	}
	if left := processesMentioning(dir); len(left) > 0 {
		t.Fatalf("processes left after SIGTERM: %v", left)
	}
}

func waitEnvFile(t *testing.T, path string, exited <-chan error, out *bytes.Buffer) map[string]string {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		if f, err := os.Open(path); err == nil {
			env := map[string]string{}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
				if ok {
					// Values may be single-quoted for the shell (a
					// multi-host database URL's '&').
					env[k] = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
				}
			}
			f.Close()
			return env
		}
		select {
		case err := <-exited:
			t.Fatalf("dev run exited (%v) before writing %s:\n%s", err, path, out.String())
		case <-deadline:
			t.Fatalf("no %s after 3 minutes:\n%s", path, out.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runWithin runs cmd to its end, at most limit, and returns what it wrote.
func runWithin(cmd *exec.Cmd, limit time.Duration) (string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("still running after %s, killed", limit)
	}
}

// initialGODEBUG is the GODEBUG a process was started with.
func initialGODEBUG(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			return v
		}
	}
	return ""
}

// processesMentioning lists live processes whose command line names dir.
func processesMentioning(dir string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmdline := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		if strings.Contains(cmdline, dir) {
			found = append(found, filepath.Base(filepath.Dir(p))+": "+cmdline)
		}
	}
	return found
}

// sharedTempDir is a temporary folder other users can enter: as root, the
// PostgreSQL cluster runs as the postgres user (t.TempDir's parent is private).
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fencegate-conformance-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
