package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/meta"
)

// runTargets runs `fencegate targets ARGS...` with only what `source
// .fencegate/env` gives a shell: DATABASE_URL and FENCEGATE_SERVER_KEY.
func runTargets(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(fencegateBinary(t), append([]string{"targets"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "DATABASE_URL=" + testenv.DatabaseURL(t), "FENCEGATE_SERVER_KEY=" + serverKey}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return errOut.String(), err
	}
	return out.String(), nil
}

type targetOut struct {
	Name, Kind, ARN, URL, Subject string
	HasSecret                     bool `json:"has_secret"`
	Queued                        int64
	DeadLetters                   int64 `json:"dead_letters"`
}

// addTarget adds a target through the command and returns what it printed.
func addTarget(t *testing.T, args ...string) targetOut {
	t.Helper()
	out, err := runTargets(t, append([]string{"add"}, append(args, "--json")...)...)
	if err != nil {
		t.Fatalf("targets add %v: %v: %s", args, err, out)
	}
	var o targetOut
	if err := json.Unmarshal([]byte(out), &o); err != nil || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("targets add printed %q, want one JSON object (%v)", out, err)
	}
	return o
}

// Targets are added, listed and refused by the command with nothing but the
// env file's variables; a webhook's secret is stored sealed under the server
// key, never in the clear.
func TestTargetsCommand(t *testing.T) {
	packageKeys(t) // migrates
	name := "wh-" + randomSuffix()
	secret := "s3cr3t-" + randomSuffix()
	wh := addTarget(t, "webhook", name, "--url", "http://127.0.0.1:1/hook", "--secret", secret)
	if wh.Name != name || wh.ARN != "arn:fencegate:sqs::"+name+":webhook" || !wh.HasSecret {
		t.Fatalf("webhook target: %+v", wh)
	}
	nt := "nats-" + randomSuffix()
	// Flags before the name work too.
	n := addTarget(t, "nats", "--url", "nats://127.0.0.1:4222", nt, "--subject", "fg.events")
	if n.ARN != "arn:fencegate:sqs::"+nt+":nats" || n.Subject != "fg.events" {
		t.Fatalf("nats target: %+v", n)
	}
	out, err := runTargets(t, "list", "--json")
	if err != nil {
		t.Fatalf("list: %v %s", err, out)
	}
	var all []targetOut
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, o := range all {
		if o.Name == name || o.Name == nt {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("list lacks the new targets: %s", out)
	}
	if strings.Contains(out, secret) {
		t.Fatalf("list shows the secret: %s", out)
	}
	// Sealed at rest: the row holds no plaintext, and opens under the server key.
	var sealed []byte
	if err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT secret_sealed FROM notify_targets WHERE name = $1`, name).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte(secret)) {
		t.Fatal("the secret is stored in the clear")
	}
	ts := &meta.Targets{Pool: packageKeys(t).Pool, Sealer: packageKeys(t).Sealer}
	got, err := ts.All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if g.Name == name && g.Secret != secret {
			t.Fatalf("the sealed secret opens to %q", g.Secret)
		}
	}
	// Refusals: a duplicate name, a bad URL, a NATS target without subject.
	for _, bad := range [][]string{
		{"add", "webhook", name, "--url", "http://x/"},
		{"add", "webhook", "other-" + randomSuffix(), "--url", "ftp://x/"},
		{"add", "nats", "other-" + randomSuffix(), "--url", "nats://x:4222"},
		{"add", "carrier-pigeon", "p", "--url", "http://x/"},
		{"redrive", "no-such-target-" + randomSuffix()},
	} {
		if out, err := runTargets(t, bad...); err == nil {
			t.Errorf("targets %v succeeded: %s", bad, out)
		}
	}
	if out, err := runTargets(t, "redrive", name); err != nil || !strings.Contains(out, "0 dead letters") {
		t.Fatalf("redrive: %v %s", err, out)
	}
	// A target a bucket names cannot be removed; one no bucket names can.
	if err := ts.SetBucketNotifications(context.Background(), "t-targets-"+randomSuffix(),
		[]meta.NotificationRule{{ID: "a", Kind: "queue", ARN: wh.ARN, Events: []string{"s3:ObjectCreated:*"}}}); err != nil {
		t.Fatal(err)
	}
	if out, err := runTargets(t, "remove", name); err == nil || !strings.Contains(out, "named by a bucket") {
		t.Fatalf("removing a target in use: %v %s", err, out)
	}
	if out, err := runTargets(t, "remove", nt); err != nil {
		t.Fatalf("remove: %v %s", err, out)
	}
	if out, _ := runTargets(t, "list", "--json"); strings.Contains(out, `"`+nt+`"`) {
		t.Fatalf("removed target still listed: %s", out)
	}
}
