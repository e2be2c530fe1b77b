package main

import (
	"os"
	"testing"
	"time"
)

// devRunConfig parses dev run's flags as devRun does and fills in its stack.
func devRunConfig(t *testing.T, args ...string) serveConfig {
	t.Helper()
	f := newFlags("dev run", devRunUsage)
	var dir string
	f.String(&dir, "dir", "FENCEGATE_DEV_DIR", ".fencegate", "")
	var cfg serveConfig
	cfg.defineFlags(f, false)
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	st := &devState{ServerKey: "stack-key", StoreAccess: "sa", StoreSecret: "ss", GatewayPort: 9100, AdminPort: 9101}
	devStack(&cfg, f, st, "postgres://stack", "http://127.0.0.1:8333")
	return cfg
}

// make run's gateway takes serve's settings from FENCEGATE_* variables and
// flags (before, it built its own configuration and ignored them), except
// the database, the server key and the store, which are the stack's.
func TestDevRunTakesServeSettings(t *testing.T) {
	for _, v := range []string{"FENCEGATE_LISTEN", "FENCEGATE_ADMIN_LISTEN", "FENCEGATE_DOMAINS", "FENCEGATE_SHUTDOWN_GRACE"} {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)
	}
	t.Setenv("FENCEGATE_SEND_STALL_TIMEOUT", "5s")
	t.Setenv("FENCEGATE_MAX_CONNS", "7")
	t.Setenv("FENCEGATE_STORE_ENDPOINT", "http://elsewhere:9000") // a sourced env file
	t.Setenv("DATABASE_URL", "postgres://elsewhere")

	cfg := devRunConfig(t)
	if cfg.SendStallTimeout != 5*time.Second || cfg.MaxConns != 7 {
		t.Errorf("send stall %v, max conns %d: want the variables' 5s and 7", cfg.SendStallTimeout, cfg.MaxConns)
	}
	if cfg.BodyStallTimeout != 20*time.Second || !cfg.SigV2 || cfg.Reconcile != 20*time.Second {
		t.Errorf("body stall %v, SigV2 %v, reconcile %v: want serve's defaults", cfg.BodyStallTimeout, cfg.SigV2, cfg.Reconcile)
	}
	if cfg.DatabaseURL != "postgres://stack" || cfg.ServerKey != "stack-key" || cfg.Store.Endpoint != "http://127.0.0.1:8333" || !cfg.AcceptAsyncReplication {
		t.Errorf("database %q, server key %q, store %q, async %v: want the stack's", cfg.DatabaseURL, cfg.ServerKey, cfg.Store.Endpoint, cfg.AcceptAsyncReplication)
	}
	if cfg.Listen != "127.0.0.1:9100" || cfg.AdminListen != "127.0.0.1:9101" || cfg.Domains != "localhost" || cfg.ShutdownGrace != 10*time.Second {
		t.Errorf("listen %q, admin %q, domains %q, grace %v: want the stack's", cfg.Listen, cfg.AdminListen, cfg.Domains, cfg.ShutdownGrace)
	}
	if err := cfg.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}

	cfg = devRunConfig(t, "--listen", "127.0.0.1:9200", "--shutdown-grace", "3s")
	t.Setenv("FENCEGATE_DOMAINS", "s3.test")
	cfg2 := devRunConfig(t)
	if cfg.Listen != "127.0.0.1:9200" || cfg.ShutdownGrace != 3*time.Second || cfg2.Domains != "s3.test" {
		t.Errorf("listen %q, grace %v, domains %q: want what was set", cfg.Listen, cfg.ShutdownGrace, cfg2.Domains)
	}
}
