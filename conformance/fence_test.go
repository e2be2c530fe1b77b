package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/testenv"
)

// The store-side fence, observed at the store: a gateway write is held at the
// store's door after the gateway settled the key; meanwhile the key changes
// straight at the store. Released, the fenced write (If-None-Match: * on an
// absent key, If-Match on a present one) reaches the store and is refused
// there: the client gets 503 SlowDown, the write is sent once, and the store
// keeps the other bytes.
func TestFenceRefusesWriteAfterStoreChanged(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease})
	// Bodies over --spool-max stream while the lease is held.
	streaming := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease, Stream: true})
	ctx := context.Background()
	bucket := "t-fence-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	direct := testenv.Store(t).S3Client() // not through the proxy
	outside := func(key, body string) {
		t.Helper()
		if _, err := direct.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(key), Body: strings.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct {
		name, key, method string
		prior             bool // the key exists (If-Match fence) or not (If-None-Match: *)
		streamed          bool // the PUT's body streams (else it was spooled)
	}{
		{"spooled PUT on an absent key", "absent", "PUT", false, false},
		{"spooled PUT on a present key", "present", "PUT", true, false},
		{"streamed PUT on an absent key", "absent-streamed", "PUT", false, true},
		{"streamed PUT on a present key", "present-streamed", "PUT", true, true},
		{"DELETE on a present key", "deleted", "DELETE", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := g
			if c.streamed {
				g = streaming
			}
			if c.prior {
				if r := putRaw(g.Endpoint, bucket, c.key, []byte("through fencegate"), nil); r.Status != 200 {
					t.Fatalf("prior PUT: %+v", r)
				}
			}
			held := fp.Hold(faultproxy.MethodPath(c.method, "/"+bucket+"/"+c.key), 1)
			watch := fp.Watch(faultproxy.MethodPath(c.method, "/"+bucket+"/"+c.key), 1)
			res := make(chan rawResult, 1)
			go func() {
				res <- doRaw(g.Endpoint, c.method, "/"+bucket+"/"+c.key, []byte("the fenced write"), nil)
			}()
			// Bounded waits: with the fence broken, a test must fail, never hang.
			within(t, held.Arrived, time.Minute, "the fenced write at the store's door") // settled and fenced
			outside(c.key, "written at the store meanwhile")
			held.Release()
			r := within(t, res, time.Minute, "the gateway's answer")
			if c.method == "DELETE" {
				// A bodiless write goes ahead in the same request once the key is
				// settled: the outside bytes become an external generation, and the
				// delete, fenced on them now, removes them (a second, new fence).
				if r.Status != 204 {
					t.Fatalf("fenced DELETE after the store changed: %+v, want 204", r)
				}
				if _, _, ok := storeGet(t, g.Store, bucket, c.key); ok {
					t.Fatal("the DELETE did not go ahead")
				}
				requireExternalGeneration(t, bucket, c.key)
				audit(t, g.Store, bucket, c.key)
				return
			}
			if !c.streamed {
				// A spooled body is whole at the gateway: like a bodiless write,
				// it is sent again, fenced on what is there now, and lands.
				if r.Status != 200 {
					t.Fatalf("spooled PUT after the store changed: %+v, want 200", r)
				}
				if body, _, _ := storeGet(t, g.Store, bucket, c.key); body != "the fenced write" {
					t.Fatalf("the store holds %q, want the resent write", body)
				}
				requireExternalGeneration(t, bucket, c.key)
				audit(t, g.Store, bucket, c.key)
				return
			}
			// A PUT's streamed body was consumed by its one sending: 503, and the
			// Watch rule must not see a second sending.
			if r.Status != 503 || r.Code != "SlowDown" {
				t.Fatalf("fenced %s after the store changed: %+v, want 503 SlowDown", c.method, r)
			}
			select {
			case ev := <-watch.Done:
				t.Fatalf("the gateway sent the write to the store a second time (%+v)", ev)
			default:
			}
			if body, _, ok := storeGet(t, g.Store, bucket, c.key); !ok || body != "written at the store meanwhile" {
				t.Fatalf("the store holds %q (present %v): the fenced write was not refused", body, ok)
			}
			// Nothing of the refused write is recorded: its attempt failed; the
			// outside bytes are settled as an external generation, so the next
			// write goes ahead (conformance/converge_test.go).
			for _, a := range attemptsOf(t, bucket, c.key) {
				if a.Op == strings.ToLower(c.method) && a.State != "committed" && a.State != "failed" {
					t.Fatalf("attempts %+v: the refused write is %s, want failed", attemptsOf(t, bucket, c.key), a.State)
				}
			}
			requireExternalGeneration(t, bucket, c.key)
			audit(t, g.Store, bucket, c.key)
		})
	}
}
