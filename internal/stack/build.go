package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Pinned store versions (docs/TESTING.md, the test stores). The cache path is keyed by them, so bumping
// a version builds the new one beside the old.
const (
	SeaweedFSModule  = "github.com/seaweedfs/seaweedfs"
	SeaweedFSVersion = "v0.0.0-20261109003541-7506e5f91cd6"
	VersitygwPackage = "github.com/versity/versitygw/cmd/versitygw"
	VersitygwVersion = "v1.8.0"
)

// CacheDir is where built store binaries live: outside the repository, shared by
// every checkout on the machine.
func CacheDir() string {
	if d := os.Getenv("FENCEGATE_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "fencegate")
	}
	return filepath.Join(os.TempDir(), "fencegate-cache")
}

// WeedPath is where the pinned SeaweedFS binary is (or will be) cached.
func WeedPath() string {
	if p := os.Getenv("FENCEGATE_WEED"); p != "" {
		return p
	}
	return filepath.Join(CacheDir(), "seaweedfs-"+SeaweedFSVersion, "weed")
}

// VersitygwPath is where the pinned versitygw binary is (or will be) cached.
func VersitygwPath() string {
	if p := os.Getenv("FENCEGATE_VERSITYGW"); p != "" {
		return p
	}
	return filepath.Join(CacheDir(), "versitygw-"+VersitygwVersion, "versitygw")
}

// EnsureWeed builds SeaweedFS into the cache unless it is there already. Its
// go.mod has a replace directive, which `go install pkg@version` refuses, so it is
// built as the main module from a writable copy of its module source.
func EnsureWeed(ctx context.Context, progress io.Writer) (string, error) {
	bin := WeedPath()
	if isExecutable(bin) {
		return bin, nil
	}
	dir := filepath.Dir(bin)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(progress, "building SeaweedFS %s into %s (about 12 minutes on a cold machine, once per machine)\n", SeaweedFSVersion, dir)
	dl := exec.CommandContext(ctx, "go", "mod", "download", "-json", SeaweedFSModule+"@"+SeaweedFSVersion)
	dl.Dir = dir
	dl.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := dl.Output()
	if err != nil {
		return "", fmt.Errorf("download SeaweedFS source: %v\n%s", err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("download SeaweedFS source: no module folder in %q", out)
	}
	work := filepath.Join(dir, "src")
	_ = os.RemoveAll(work)
	defer os.RemoveAll(work)
	if err := run(ctx, progress, "", "cp", "-r", mod.Dir+"/.", work+"/"); err != nil {
		return "", err
	}
	if err := run(ctx, progress, "", "chmod", "-R", "u+w", work); err != nil {
		return "", err
	}
	err = withProgress(progress, "SeaweedFS", func() error {
		return run(ctx, progress, work, "go", "build", "-trimpath", "-o", bin+".tmp", "./weed")
	})
	if err != nil {
		return "", err
	}
	return bin, os.Rename(bin+".tmp", bin)
}

// EnsureVersitygw installs versitygw into the cache unless it is there already.
func EnsureVersitygw(ctx context.Context, progress io.Writer) (string, error) {
	bin := VersitygwPath()
	if isExecutable(bin) {
		return bin, nil
	}
	dir := filepath.Dir(bin)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(progress, "building versitygw %s into %s (about 2.5 minutes, once per machine)\n", VersitygwVersion, dir)
	err := withProgress(progress, "versitygw", func() error {
		return run(ctx, progress, "", "env", "GOBIN="+dir, "go", "install", VersitygwPackage+"@"+VersitygwVersion)
	})
	return bin, err
}

func run(ctx context.Context, progress io.Writer, dir string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = progress, progress
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %v: %w", name, args, err)
	}
	return nil
}

// withProgress prints a line every 30 s so a long cold build does not look hung.
func withProgress(w io.Writer, what string, fn func() error) error {
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fmt.Fprintf(w, "still building %s (%s)\n", what, time.Since(start).Round(time.Second))
			}
		}
	}()
	err := fn()
	close(stop)
	if err == nil {
		fmt.Fprintf(w, "built %s in %s\n", what, time.Since(start).Round(time.Second))
	}
	return err
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
