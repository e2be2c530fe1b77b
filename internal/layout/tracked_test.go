package layout

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckTrackedRefusesBinariesAndLargeFiles runs scripts/check-tracked.sh
// (`make lint`'s check of what git tracks) on a scratch repository: it passes
// text, scripts and small images, and refuses a file over 1 MiB, an ELF
// program and an executable that is not text, each by name.
func TestCheckTrackedRefusesBinariesAndLargeFiles(t *testing.T) {
	root := strings.Fields(string(goList(t, "list", "-m", "-f", "{{.Dir}}")))[0]
	script := filepath.Join(root, "scripts", "check-tracked.sh")
	repo := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name string, b []byte, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(repo, name), b, mode); err != nil {
			t.Fatal(err)
		}
		git("add", "-f", name)
	}
	check := func() (string, bool) {
		t.Helper()
		cmd := exec.Command("bash", script, repo)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if _, failed := err.(*exec.ExitError); err != nil && !failed {
			t.Fatal(err)
		}
		return stderr.String(), err == nil
	}
	git("init", "-q")
	write("main.go", []byte("package main\n"), 0o644)
	write("run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755)
	write("plot.png", append([]byte("\x89PNG\r\n\x1a\n\x00\x00"), make([]byte, 1000)...), 0o644)
	write("empty", nil, 0o644)
	if out, ok := check(); !ok {
		t.Fatalf("a clean index was refused:\n%s", out)
	}
	for _, c := range []struct {
		name string
		body []byte
		mode os.FileMode
		want string
	}{
		{"big.json", bytes.Repeat([]byte("0123456789abcde\n"), 1<<16+1), 0o644, "over the 1 MiB limit"},
		{"fencegate", append([]byte("\x7fELF\x02\x01\x01\x00"), make([]byte, 4096)...), 0o755, "is an executable binary"},
		{"tool.elf", append([]byte("\x7fELF\x02\x01\x01\x00"), make([]byte, 64)...), 0o644, "is an executable binary"},
		{"blob", append([]byte("data"), make([]byte, 64)...), 0o755, "is an executable that is not text"},
	} {
		write(c.name, c.body, c.mode)
		out, ok := check()
		if ok || !strings.Contains(out, c.name+" ") || !strings.Contains(out, c.want) {
			t.Errorf("%s: check passed=%v, said:\n%s\nwant it refused: %q", c.name, ok, out, c.want)
		}
		git("rm", "-q", "--cached", c.name)
	}
	if out, ok := check(); !ok {
		t.Fatalf("the index with the bad files removed was refused:\n%s", out)
	}
}
