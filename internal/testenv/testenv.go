// Package testenv gives test packages the real parts they run against. Under
// `make test`, `fencegate dev exec` has started one PostgreSQL cluster and one
// SeaweedFS for the whole run and exported where they are; each package then gets
// its own fresh database and its own buckets. Run by hand (`go test ./meta`), a
// package starts private ones and stops them when it ends.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
)

var (
	mu       sync.Mutex
	cleanups []func()
	dbURL    string
	store    *stack.Endpoint
	tmpRoot  string
)

// AtExit runs fn when the package's tests end.
func AtExit(fn func()) {
	mu.Lock()
	defer mu.Unlock()
	cleanups = append(cleanups, fn)
}

// Main runs the package's tests and then stops whatever this package started.
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	mu.Unlock()
	os.Exit(code)
}

func dir() (string, error) {
	if tmpRoot != "" {
		return tmpRoot, nil
	}
	d, err := os.MkdirTemp("", "fencegate-test-")
	if err != nil {
		return "", err
	}
	// Private to this user, yet enterable by the user PostgreSQL runs as (root
	// is refused).
	if err := stack.MakePrivateDir(d); err != nil {
		os.RemoveAll(d)
		return "", err
	}
	tmpRoot = d
	cleanups = append(cleanups, func() { os.RemoveAll(d) })
	return d, nil
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// DatabaseURL is a fresh database for this test package (created on first use,
// with nothing in it: callers migrate).
func DatabaseURL(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if dbURL != "" {
		return dbURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := os.Getenv(stack.EnvDatabaseURL)
	if admin == "" {
		d, err := dir()
		if err != nil {
			t.Fatal(err)
		}
		pg, err := stack.StartPostgres(ctx, filepath.Join(d, "pg"), 0, false)
		if err != nil {
			t.Fatalf("start a private PostgreSQL (DATABASE_URL is unset): %v", err)
		}
		cleanups = append(cleanups, pg.Stop)
		admin = pg.URL("postgres")
	}
	exe, _ := os.Executable()
	name := "test_" + nonIdent.ReplaceAllString(strings.ToLower(strings.TrimSuffix(filepath.Base(exe), ".test")), "_") + "_" + RandomHex(4)
	url, err := stack.CreateDatabase(ctx, admin, name)
	if err != nil {
		t.Fatalf("create test database: %v", err)
	}
	dbURL = url
	return url
}

// Store is the run's SeaweedFS, or one started for this package.
func Store(t testing.TB) stack.Endpoint {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if store != nil {
		return *store
	}
	if ep := os.Getenv(stack.EnvS3Endpoint); ep != "" {
		store = &stack.Endpoint{URL: ep, AccessKey: os.Getenv(stack.EnvS3AccessKey), SecretKey: os.Getenv(stack.EnvS3SecretKey), Region: "us-east-1"}
		return *store
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bin, err := stack.EnsureWeed(ctx, os.Stderr)
	if err != nil {
		t.Fatalf("SeaweedFS: %v", err)
	}
	d, err := dir()
	if err != nil {
		t.Fatal(err)
	}
	s, err := stack.StartSeaweed(ctx, bin, filepath.Join(d, "seaweedfs"), stack.SeaweedPorts{}, "FGTEST"+strings.ToUpper(RandomHex(7)), RandomHex(20), stack.SeaweedHTTPClosed())
	if err != nil {
		t.Fatal(err)
	}
	cleanups = append(cleanups, s.Stop)
	store = &s.Endpoint
	return *store
}

// Bucket is a fresh bucket name, unique across the run, valid for S3.
func Bucket(t testing.TB) string {
	name := strings.ToLower(nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "-"))
	name = strings.Trim(name, "-")
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t-%s-%s", strings.Trim(name, "-"), RandomHex(4))
}

// RandomHex is 2n random hex digits, for names unique across a run.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
