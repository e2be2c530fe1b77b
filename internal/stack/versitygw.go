package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Versitygw is a running versitygw, either over its posix backend (a second,
// sloppier store that keeps truncated bodies) or as an `s3` proxy in front of
// another store (the benchmark's peer).
type Versitygw struct {
	Endpoint
	proc *proc
}

// StartVersitygwPosix serves the folder dir as an S3 store.
func StartVersitygwPosix(ctx context.Context, bin, dir, accessKey, secretKey string) (*Versitygw, error) {
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	return startVersitygw(ctx, bin, filepath.Join(dir, "versitygw.log"), accessKey, secretKey, "posix", data)
}

// StartVersitygwProxy serves backend through versitygw's `s3` proxy. Over a
// plain-HTTP backend it fails aws-chunked and presigned uploads unless its data
// integrity check is off (docs/TESTING.md, the test stores).
func StartVersitygwProxy(ctx context.Context, bin, logDir string, backend Endpoint, accessKey, secretKey string) (*Versitygw, error) {
	return startVersitygw(ctx, bin, filepath.Join(logDir, "versitygw-s3.log"), accessKey, secretKey,
		"s3", "--access", backend.AccessKey, "--secret", backend.SecretKey, "--endpoint", backend.URL,
		"--region", backend.Region, "--use-path-style", "--disable-data-integrity-check")
}

func startVersitygw(ctx context.Context, bin, logPath, accessKey, secretKey string, backend ...string) (*Versitygw, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--access", accessKey, "--secret", secretKey, "--region", "us-east-1",
		"--port", fmt.Sprintf("127.0.0.1:%d", port), "--quiet"}, backend...)
	// versitygw's `s3` backend builds its AWS config with the SDK defaults, which
	// fail while AWS_CA_BUNDLE is set.
	var env []string
	for _, kv := range os.Environ() {
		if len(kv) < 14 || kv[:14] != "AWS_CA_BUNDLE=" {
			env = append(env, kv)
		}
	}
	p, err := startProc("versitygw", logPath, nil, env, bin, args...)
	if err != nil {
		return nil, err
	}
	v := &Versitygw{Endpoint: Endpoint{URL: fmt.Sprintf("http://127.0.0.1:%d", port), AccessKey: accessKey, SecretKey: secretKey, Region: "us-east-1"}, proc: p}
	if err := waitS3(ctx, v.Endpoint, p, 60*time.Second); err != nil {
		v.Stop()
		return nil, fmt.Errorf("versitygw on port %d not ready: %v\n%s", port, err, p.logTail())
	}
	return v, nil
}

// Stop ends versitygw.
func (v *Versitygw) Stop() {
	if v != nil {
		v.proc.stop(syscall.SIGTERM, 10*time.Second)
	}
}
