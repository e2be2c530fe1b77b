package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/meta"
)

// A grant revoked (or a key deleted) in the catalog takes effect at a running
// gateway within its key poll interval: the key's next requests get 403, and
// none of them reaches the store.
func TestRevocationTakesEffect(t *testing.T) {
	const poll = 200 * time.Millisecond
	g := startGateway(t, gatewayOptions{Lease: testLease, Configure: func(c *gateway.Config) { c.KeyPollInterval = poll }})
	ctx := context.Background()
	bucket := "t-revoke-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	write := meta.Grant{Bucket: bucket, Permission: meta.PermWrite}
	k, err := g.Keys.Create(ctx, "revocable "+t.Name(), []meta.Grant{write})
	if err != nil {
		t.Fatal(err)
	}
	ep := g.Endpoint
	ep.AccessKey, ep.SecretKey = k.ID, k.Secret
	if r := putRaw(ep, bucket, "k", []byte("allowed"), nil); r.Status != 200 {
		t.Fatalf("PUT with the grant: %+v", r)
	}

	// Until: the first refusal, polled, within a few poll intervals.
	refusedWithin := func(what, code string) {
		t.Helper()
		start := time.Now()
		limit := 5*poll + 2*time.Second
		for {
			r := putRaw(ep, bucket, "k", []byte("after "+what), nil)
			if r.Status == 403 && r.Code == code {
				t.Logf("%s took effect after %s", what, time.Since(start).Round(time.Millisecond))
				break
			}
			if r.Status != 200 {
				t.Fatalf("after %s: %+v, want 200 (not yet seen) or 403 %s", what, r, code)
			}
			if time.Since(start) > limit {
				t.Fatalf("%s not in effect after %s (poll interval %s)", what, limit, poll)
			}
			time.Sleep(poll / 4)
		}
		// From then on every request is refused before the store sees it.
		before := g.StoreRequests.Load()
		for range 3 {
			if r := putRaw(ep, bucket, "k", []byte("refused"), nil); r.Status != 403 || r.Code != code {
				t.Fatalf("after %s took effect: %+v, want 403 %s", what, r, code)
			}
		}
		if n := g.StoreRequests.Load() - before; n != 0 {
			t.Fatalf("after %s, %d refused requests reached the store", what, n)
		}
	}
	if err := g.Keys.Revoke(ctx, k.ID, write); err != nil {
		t.Fatal(err)
	}
	refusedWithin("revoking the grant", "AccessDenied")
	if got := string(getBody(t, g.Endpoint, bucket, "k")); !strings.HasPrefix(got, "a") || got == "refused" {
		t.Fatalf("object %q after refusals", got)
	}

	// Granted again, then the key deleted.
	if err := g.Keys.Grant(ctx, k.ID, write); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the grant to take effect again", 5*poll+2*time.Second, func() bool {
		return putRaw(ep, bucket, "k", []byte("allowed again"), nil).Status == 200
	})
	if err := g.Keys.Delete(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	refusedWithin("deleting the key", "InvalidAccessKeyId")
	audit(t, g.Store, bucket, "k")
}

// Two DeleteObjects batches over overlapping keys, through two gateways, while
// one key of the overlap is held mid-delete at the store: both finish (no
// deadlock), every key is gone, and each key got exactly one delete
// generation after its one write.
func TestOverlappingDeleteObjectsBatches(t *testing.T) {
	fp, g1, g2, waiting := twoGatewaysOnFaultStore(t)
	ctx := context.Background()
	bucket := "t-deloverlap-" + randomSuffix()
	createBucket(t, g1.Endpoint, bucket)
	const n = 90
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
		if r := putRaw(g1.Endpoint, bucket, keys[i], []byte("v "+keys[i]), nil); r.Status != 200 {
			t.Fatalf("PUT %s: %+v", keys[i], r)
		}
	}
	ids := func(ks []string) []types.ObjectIdentifier {
		out := make([]types.ObjectIdentifier, len(ks))
		for i, k := range ks {
			out[i] = types.ObjectIdentifier{Key: aws.String(k)}
		}
		return out
	}
	type result struct {
		out *s3.DeleteObjectsOutput
		err error
	}
	// A: k000-k059; B: k030-k089. A's delete of k045 is held at the store.
	held := fp.Hold(faultproxy.MethodPath("DELETE", "/"+bucket+"/k045"), 1)
	resA, resB := make(chan result, 1), make(chan result, 1)
	go func() {
		out, err := g1.S3Client().DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket, Delete: &types.Delete{Objects: ids(keys[:60])}})
		resA <- result{out, err}
	}()
	<-held.Arrived
	go func() {
		out, err := g2.S3Client().DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket, Delete: &types.Delete{Objects: ids(keys[30:])}})
		resB <- result{out, err}
	}()
	waiting.wait(t, "batch B to wait for the key batch A holds")
	held.Release()
	timeout := time.After(2 * time.Minute)
	var a, b result
	for range 2 {
		select {
		case a = <-resA:
			resA = nil
		case b = <-resB:
			resB = nil
		case <-timeout:
			t.Fatal("overlapping DeleteObjects batches did not both finish (deadlock?)")
		}
	}
	for name, r := range map[string]result{"A": a, "B": b} {
		if r.err != nil {
			t.Fatalf("batch %s: %v", name, r.err)
		}
		if len(r.out.Errors) != 0 || len(r.out.Deleted) != 60 {
			t.Fatalf("batch %s: %d deleted, errors %+v", name, len(r.out.Deleted), r.out.Errors)
		}
	}
	for _, k := range keys {
		if storeHas(t, g1.Store, bucket, k) {
			t.Errorf("%s still at the store", k)
		}
		gens := generationsOf(t, bucket, k)
		deletes := 0
		for _, g := range gens {
			if g.Deleted {
				deletes++
			}
		}
		if len(gens) == 0 || gens[0].Deleted || !gens[len(gens)-1].Deleted || deletes != 1 {
			t.Errorf("%s: generations %+v, want its write then exactly one delete", k, gens)
		}
	}
	audit(t, g1.Store, bucket, keys...)
}

// Conditional writes from a client other than the Go SDK: the aws cli
// (botocore) sends If-None-Match / If-Match on PutObject and CopyObject and
// x-amz-copy-source-if-match on the copy's source; fencegate answers each as
// S3 does, and a refused condition writes nothing.
func TestConditionalWritesAwsCLI(t *testing.T) {
	g := startGateway(t, gatewayOptions{Lease: testLease})
	bucket := "t-cond-cli-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	cli := awsCLI(t, &clientFixture{ep: g.Endpoint}, 1)
	dir := t.TempDir()
	file := func(name, body string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	etagOf := func(out string) string {
		var v struct{ ETag string }
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return strings.Trim(v.ETag, `"`)
	}
	copyETag := func(out string) string {
		var v struct{ CopyObjectResult struct{ ETag string } }
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return strings.Trim(v.CopyObjectResult.ETag, `"`)
	}
	refused := func(what string, args ...string) {
		t.Helper()
		stdout, stderr, err := cli.try(args...)
		if err == nil {
			t.Fatalf("%s succeeded: %s", what, stdout)
		}
		if !strings.Contains(stderr, "PreconditionFailed") {
			t.Fatalf("%s: %v, want PreconditionFailed: %s", what, err, stderr)
		}
	}
	gens := func(key string) int { return len(generationsOf(t, bucket, key)) }

	e1 := etagOf(cli.run("s3api", "put-object", "--bucket", bucket, "--key", "k", "--body", file("one", "one"), "--if-none-match", "*"))
	refused("put-object --if-none-match * on an existing key",
		"s3api", "put-object", "--bucket", bucket, "--key", "k", "--body", file("two", "two"), "--if-none-match", "*")
	e2 := etagOf(cli.run("s3api", "put-object", "--bucket", bucket, "--key", "k", "--body", file("three", "three"), "--if-match", e1))
	refused("put-object --if-match a stale ETag",
		"s3api", "put-object", "--bucket", bucket, "--key", "k", "--body", file("four", "four"), "--if-match", e1)
	if got := string(getBody(t, g.Endpoint, bucket, "k")); got != "three" || gens("k") != 2 {
		t.Fatalf("after conditional PUTs: %q with %d generations, want \"three\" with 2", got, gens("k"))
	}

	// CopyObject: the source's condition, then the destination's.
	src := bucket + "/k"
	refused("copy-object --copy-source-if-match a stale ETag",
		"s3api", "copy-object", "--bucket", bucket, "--key", "c", "--copy-source", src, "--copy-source-if-match", e1)
	refused("copy-object --copy-source-if-none-match the current ETag",
		"s3api", "copy-object", "--bucket", bucket, "--key", "c", "--copy-source", src, "--copy-source-if-none-match", e2)
	if storeHas(t, g.Store, bucket, "c") || gens("c") != 0 {
		t.Fatal("a refused copy left an object or a generation")
	}
	c1 := copyETag(cli.run("s3api", "copy-object", "--bucket", bucket, "--key", "c", "--copy-source", src, "--copy-source-if-match", e2, "--if-none-match", "*"))
	refused("copy-object --if-none-match * onto an existing key",
		"s3api", "copy-object", "--bucket", bucket, "--key", "c", "--copy-source", src, "--if-none-match", "*")
	refused("copy-object --if-match a wrong destination ETag",
		"s3api", "copy-object", "--bucket", bucket, "--key", "c", "--copy-source", src, "--if-match", e1)
	cli.run("s3api", "copy-object", "--bucket", bucket, "--key", "c", "--copy-source", src, "--if-match", c1)
	if got := string(getBody(t, g.Endpoint, bucket, "c")); got != "three" || gens("c") != 2 {
		t.Fatalf("after conditional copies: %q with %d generations, want \"three\" with 2", got, gens("c"))
	}
	audit(t, g.Store, bucket, "k", "c")
}
