package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
)

// Case 8a: a DeleteObject racing a PUT on the same key waits for the PUT's
// lease, then deletes what the PUT wrote (fenced on its ETag).
func TestDeleteRacesPut(t *testing.T) {
	fp, g1, g2, waiting := twoGatewaysOnFaultStore(t)
	bucket := "t-delrace-" + randomSuffix()
	createBucket(t, g1.Endpoint, bucket)
	held := fp.Hold(faultproxy.MethodPath("PUT", "/"+bucket+"/k"), 1)
	put := make(chan rawResult, 1)
	go func() { put <- putRaw(g1.Endpoint, bucket, "k", []byte("written, then deleted"), nil) }()
	<-held.Arrived
	del := make(chan rawResult, 1)
	go func() { del <- doRaw(g2.Endpoint, "DELETE", "/"+bucket+"/k", nil, nil) }()
	waiting.wait(t, "the delete to wait for the PUT's lease")
	held.Release()
	p, d := <-put, <-del
	if p.Status != 200 || d.Status != 204 {
		t.Fatalf("PUT %+v, DELETE %+v", p, d)
	}
	gens := generationsOf(t, bucket, "k")
	if len(gens) != 2 || gens[0].Deleted || !gens[1].Deleted {
		t.Fatalf("generations %+v, want the PUT then the delete", gens)
	}
	audit(t, g1.Store, bucket, "k")
}

// Case 8b: DeleteObjects over more than 1,000 keys while some are leased by
// live uploads: it deletes the free ones, waits for the leased ones without
// holding other leases, and nothing deadlocks.
func TestDeleteObjectsWhileKeysAreLeased(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1,000 keys")
	}
	fp, fep := faultStore(t)
	waiting := newSignal()
	g1 := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease})
	g2 := startGateway(t, gatewayOptions{Store: &fep, Lease: testLease, DatabaseURL: testenv.DatabaseURL(t),
		Hooks: lease.Hooks{Waiting: func(string, string) { waiting.fire() }}})
	ctx := context.Background()
	bucket := "t-delmany-" + randomSuffix()
	createBucket(t, g1.Endpoint, bucket)
	const n = 1000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%04d", i)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	errs := make(chan error, n)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if r := putRaw(g1.Endpoint, bucket, k, []byte("v1 "+k), nil); r.Status != 200 {
				errs <- fmt.Errorf("%s: %+v", k, r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	leased := []string{keys[7], keys[500], keys[998]}
	var holds []*faultproxy.Held
	puts := make(chan rawResult, len(leased))
	for _, k := range leased {
		h := fp.Hold(faultproxy.MethodPath("PUT", "/"+bucket+"/"+k), 1)
		holds = append(holds, h)
		go func() { puts <- putRaw(g1.Endpoint, bucket, k, []byte("v2 "+k), nil) }()
		<-h.Arrived
	}
	objs := make([]types.ObjectIdentifier, n)
	for i, k := range keys {
		objs[i] = types.ObjectIdentifier{Key: aws.String(k)}
	}
	type result struct {
		out *s3.DeleteObjectsOutput
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := g2.S3Client().DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket, Delete: &types.Delete{Objects: objs}})
		done <- result{out, err}
	}()
	waiting.wait(t, "DeleteObjects to wait for a leased key")
	for _, h := range holds {
		h.Release()
	}
	for range leased {
		if r := <-puts; r.Status != 200 {
			t.Fatalf("held upload: %+v", r)
		}
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.out.Errors) != 0 || len(res.out.Deleted) != n {
		t.Fatalf("DeleteObjects: %d deleted, errors %+v", len(res.out.Deleted), res.out.Errors)
	}
	audit(t, g1.Store, bucket, keys...)
	for _, k := range leased {
		gens := generationsOf(t, bucket, k)
		if len(gens) != 3 || !gens[2].Deleted {
			t.Fatalf("%s: generations %+v, want v1, v2, deleted", k, gens)
		}
	}
}

// twoGatewaysOnFaultStore starts two gateways in front of one fault proxy; the
// second has its own database pool and fires waiting when one of its writers
// finds a key leased.
func twoGatewaysOnFaultStore(t *testing.T) (fp *faultproxy.HTTP, g1, g2 *testGateway, waiting *signal) {
	t.Helper()
	fp, fep := faultStore(t)
	waiting = newSignal()
	g1 = startGateway(t, gatewayOptions{Store: &fep, Lease: testLease})
	g2 = startGateway(t, gatewayOptions{Store: &fep, Lease: testLease, DatabaseURL: testenv.DatabaseURL(t),
		Hooks: lease.Hooks{Waiting: func(string, string) { waiting.fire() }}})
	return fp, g1, g2, waiting
}
