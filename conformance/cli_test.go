package conformance

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/stack"
)

// Each command's -h lists the flags it takes and no other command's;
// `fencegate help` lists every command with a line each.
func TestCommandsListOnlyTheirFlags(t *testing.T) {
	bin := fencegateBinary(t)
	help := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("fencegate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	serveOnly := []string{"--listen ", "--admin-listen", "--admin-token", "--anonymous-write-buckets", "--cors-allow-origins",
		"--spool-max", "--max-conns", "--reconcile-interval", "--migrate", "--tls-cert", "--lease-listen"}
	for _, c := range []struct {
		args     []string
		has, not []string
	}{
		{[]string{"audit", "-h"}, []string{"--prefix", "--repair", "--json", "--database-url", "--store-endpoint", "--store-secret-key", "--guard-horizon"},
			append([]string{"--backend-endpoint", "--server-key", "--workers"}, serveOnly...)},
		{[]string{"catalog", "import", "-h"}, []string{"--workers", "--database-url", "--store-endpoint", "--guard-horizon"},
			append([]string{"--backend-endpoint", "--prefix", "--repair"}, serveOnly...)},
		{[]string{"status", "-h"}, []string{"--json", "--database-url", "--upload-abandoned-after"},
			append([]string{"--store-endpoint", "--lease-ttl", "--reconcile-budget"}, serveOnly...)},
		{[]string{"keys", "-h"}, []string{"--database-url", "--server-key", "--description"},
			append([]string{"--store-endpoint", "--lease-ttl"}, serveOnly...)},
		{[]string{"help", "migrate"}, []string{"--database-url"}, append([]string{"--store-endpoint", "--server-key"}, serveOnly...)},
		{[]string{"serve", "-h"}, append([]string{"--store-endpoint", "--database-url", "--server-key"}, serveOnly...),
			[]string{"--backend-endpoint", "--prefix", "--workers"}},
	} {
		out := help(c.args...)
		for _, s := range c.has {
			if !strings.Contains(out, s) {
				t.Errorf("fencegate %s lacks %s:\n%s", strings.Join(c.args, " "), s, out)
			}
		}
		for _, s := range c.not {
			if strings.Contains(out, s) {
				t.Errorf("fencegate %s lists %s, not its flag:\n%s", strings.Join(c.args, " "), s, out)
			}
		}
	}
	out := help("help")
	for _, c := range []string{"serve", "migrate", "keys", "catalog", "audit", "status", "dev"} {
		if !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("fencegate help lacks a line for %s:\n%s", c, out)
		}
	}
	// A missing setting is named with its flag and its variable.
	cmd := exec.Command(bin, "audit", "some-bucket")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	msg, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "--store-endpoint or $FENCEGATE_STORE_ENDPOINT") ||
		!strings.Contains(string(msg), "$DATABASE_URL") {
		t.Fatalf("audit without configuration: %v\n%s", err, msg)
	}
}

// `make run`, then `source .fencegate/env`: every tool works on that stack
// with no flag, from the env file's variables alone.
func TestToolsWorkFromTheEnvFile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole stack")
	}
	bin := fencegateBinary(t)
	dir := sharedTempDir(t)
	run := exec.Command(bin, "dev", "run", "--dir", dir)
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	defer func() {
		_ = run.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = run.Process.Kill()
		}
	}()
	env := waitEnvFile(t, filepath.Join(dir, "env"), done, &out)

	ctx := context.Background()
	bucket := "t-envfile-" + randomSuffix()
	c := stack.Endpoint{URL: env["FENCEGATE_ENDPOINT"], AccessKey: env["AWS_ACCESS_KEY_ID"], SecretKey: env["AWS_SECRET_ACCESS_KEY"], Region: env["AWS_DEFAULT_REGION"]}.S3Client()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	// Nothing but PATH and the env file: no FENCEGATE_* of the test's own.
	sourced := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		sourced = append(sourced, k+"="+v)
	}
	tool := func(want string, args ...string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = sourced
		got, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(got), want) {
			t.Errorf("after sourcing the env file, fencegate %s: %v (want %q)\n%s", strings.Join(args, " "), err, want, got)
		}
	}
	tool("LEASES HELD", "status")
	tool(`"leases_held"`, "status", "--json")
	tool(env["AWS_ACCESS_KEY_ID"], "keys", "list")
	tool("0 divergences in "+bucket, "audit", bucket)
	tool("imported 1 keys of "+bucket, "catalog", "import", bucket)
	tool("schema version", "migrate")
}
