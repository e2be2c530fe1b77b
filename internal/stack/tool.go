package stack

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
)

// RunTool runs a `fencegate` subcommand (bin) with env and returns its
// output; on failure, its standard error follows.
func RunTool(ctx context.Context, bin string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// CreateAccessKey runs `fencegate keys create` with the grants (such as
// "admin:*") and returns the key pair it prints, as an Endpoint without a URL.
func CreateAccessKey(ctx context.Context, bin string, env []string, description string, grants ...string) (Endpoint, error) {
	out, err := RunTool(ctx, bin, env, append([]string{"keys", "create", "--description", description}, grants...)...)
	if err != nil {
		return Endpoint{}, fmt.Errorf("fencegate keys create: %v\n%s", err, out)
	}
	ep := Endpoint{Region: "us-east-1"}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "AWS_ACCESS_KEY_ID="); ok {
			ep.AccessKey = v
		} else if v, ok := strings.CutPrefix(sc.Text(), "AWS_SECRET_ACCESS_KEY="); ok {
			ep.SecretKey = v
		}
	}
	if ep.AccessKey == "" || ep.SecretKey == "" {
		return Endpoint{}, fmt.Errorf("fencegate keys create printed no key pair:\n%s", out)
	}
	return ep, nil
}
