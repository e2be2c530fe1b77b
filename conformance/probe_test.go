package conformance

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// The start-up probe proves every fenced operation and truncation safety on
// SeaweedFS; on versitygw's posix backend it reports what that store lacks.
func TestStartupProbe(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	res, err := g.Server.Probe(context.Background(), "fencegate-probe")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Fenced() {
		t.Fatalf("SeaweedFS probe: %s", res)
	}
	t.Logf("SeaweedFS: %s", res)
	// SeaweedFS folds every whitespace run of a signed header value, as
	// botocore signs (TestHeaderValuesWithTabs): the probe finds it.
	if got := res.HeaderWhitespace.String(); got != "every whitespace run folded" {
		t.Errorf("SeaweedFS's folding of header whitespace: the probe found %q", got)
	}
	// SeaweedFS replaces an object "p" with its directory when the marker
	// "p/" is written (TestMarkerNeverReplacesAnObject): the probe finds it.
	if res.MarkerKeepsObject {
		t.Errorf("the probe found that SeaweedFS keeps an object beside its marker: %s", res)
	}
	// What the probe learnt of backslashes keeps one spelling one object: a
	// key with '\\' is refused, or it is stored apart from its '/' twin.
	bucket := "t-probe-fold-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	res1 := putRaw(g.Endpoint, bucket, "x%5Cy", []byte("backslash"), nil)
	switch {
	case res1.Status == 400 && res1.Code == "InvalidArgument":
		t.Log("the store folds '\\' into '/': such keys are refused")
	case res1.Status == 200:
		requireAbsent(t, g.Store, bucket, "x/y", "a key with a backslash")
	default:
		t.Fatalf("PUT x\\y: %d %s", res1.Status, res1.Code)
	}

	bin := stack.VersitygwPath()
	if _, err := os.Stat(bin); err != nil {
		t.Skip("versitygw not built")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := stack.StartVersitygwPosix(ctx, bin, t.TempDir(), "FGVGWPROBE0000001", "versitygw-probe-secret-00000000000000000")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	gv := startGateway(t, gatewayOptions{Store: &v.Endpoint})
	resV, err := gv.Server.Probe(ctx, "fencegate-probe")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("versitygw posix: fenced=%v, a marker keeps its object=%v: %s", resV.Fenced(), resV.MarkerKeepsObject, resV)
	for _, c := range resV.Optional {
		if c.Name == "a signed header value with a tab is verified by the store" && !c.OK {
			t.Errorf("versitygw verifies a tab in a signed header neither way: %s", c.Note)
		}
	}
	// The probe exists to catch a store that ignores a condition: versitygw
	// v1.8.0's posix backend is one (it overwrites a CopyObject destination
	// despite If-None-Match: * or a stale If-Match). The probe must report
	// exactly those checks failed and the store unfenced; every other passes.
	if resV.Fenced() {
		t.Fatalf("the probe reports versitygw posix fenced; it must catch its CopyObject If-None-Match overwrite: %s", resV)
	}
	seen := map[string]bool{}
	for _, c := range resV.Checks {
		seen[c.Name] = true
		wantOK := c.Name != "CopyObject If-None-Match on an existing destination" &&
			c.Name != "CopyObject If-Match with a stale ETag on the destination"
		if c.OK != wantOK {
			t.Errorf("versitygw posix check %q: ok=%v, want %v (%s)", c.Name, c.OK, wantOK, c.Note)
		}
	}
	for _, name := range []string{"CopyObject If-None-Match on an existing destination", "CopyObject If-Match with a stale ETag on the destination",
		"CompleteMultipartUpload If-Match with a stale ETag", "DeleteObject on an absent key", "aws-chunked body cut short is not published"} {
		if !seen[name] {
			t.Errorf("the probe no longer runs the check %q", name)
		}
	}
}

// A store that refuses fencegate's own key fails the start-up probe with the
// store's own word for it and the flags to check (before: "create answered
// 403", which an operator reads as a permissions problem of the bucket).
func TestStartupProbeNamesTheStoresRefusal(t *testing.T) {
	store := testenv.Store(t)
	store.SecretKey = "wrong-backend-secret-000000000000000000"
	g := startGateway(t, gatewayOptions{Store: &store})
	_, err := g.Server.Probe(context.Background(), "fencegate-probe")
	if err == nil {
		t.Fatal("the probe passed with a wrong store secret")
	}
	for _, want := range []string{"403", "SignatureDoesNotMatch", "--store-access-key", "--store-secret-key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("probe error %q lacks %q", err, want)
		}
	}
}
