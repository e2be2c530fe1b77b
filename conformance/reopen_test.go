package conformance

import (
	"bytes"
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/stack"
)

// A guard leaves only by proof (docs/DESIGN.md, "When a guard ends"). No
// commit proves that an unknown write can no longer land: a write fenced on
// absence (If-None-Match: *) is excluded by a later generation only while the
// key stays present, a write fenced on an ETag only while that ETag does not
// come back, and a client's own condition may exclude nothing. These tests cut
// a write on the wire, commit other generations around it, deliver it, and
// require that fencegate never said it could not land, and that the catalog
// takes it in once it has.

// The chaos campaign's resurrection (issue 27): a PUT fenced on absence is
// cut, a later generation commits, a DELETE reopens the fence, and the cut PUT
// lands.
func TestStarGuardOutlivesLaterGenerationAndDelete(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-stargen-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	cut := []byte("the cut write, fenced on absence")
	held := cutHeldWrite(t, fp, fep, faultproxy.MethodPath("PUT", "/"+bucket+"/k"), func(g1 *testGateway) rawResult {
		return putRaw(g1.Endpoint, bucket, "k", cut, nil)
	})
	as := attemptsOf(t, bucket, "k")
	if len(as) != 1 || as[0].State != "unknown" {
		t.Fatalf("attempts after the cut: %+v, want one unknown", as)
	}
	if r := putRaw(g.Endpoint, bucket, "k", []byte("a later generation"), nil); r.Status != 200 {
		t.Fatalf("PUT through the gateway: %+v", r)
	}
	if d := attemptDetailOf(t, as[0].ID); d.state != "unknown" {
		t.Fatalf("after a later generation the cut PUT is %s (%s), want unknown: a delete can reopen its fence", d.state, d.reason)
	}
	if r := doRaw(g.Endpoint, "DELETE", "/"+bucket+"/k", nil, nil); r.Status != 204 {
		t.Fatalf("DELETE: %+v", r)
	}
	held.ReleaseDetached()
	if st := delivered(t, held); st != 200 {
		t.Fatalf("the cut PUT reached the store, which answered %d", st)
	}
	if got := getBody(t, g.Endpoint, bucket, "k"); !bytes.Equal(got, cut) {
		t.Fatalf("GET after the late landing: %q", got)
	}
	reconcileOnce(t, g)
	audit(t, g.Store, bucket, "k")
	if s := attemptState(t, as[0].ID); s != "adopted" {
		t.Fatalf("the cut PUT is %s, want adopted", s)
	}
}

// A commit that writes the very ETag a cut write was fenced on (an identical
// re-upload) does not exclude it: the cut write's If-Match is true again.
func TestSameETagCommitKeepsGuard(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-sameetag-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	first := []byte("the first bytes")
	if r := putRaw(g.Endpoint, bucket, "k", first, nil); r.Status != 200 {
		t.Fatalf("first PUT: %+v", r)
	}
	cut := []byte("the cut write, fenced on the first bytes' ETag")
	held := cutHeldWrite(t, fp, fep, faultproxy.MethodPath("PUT", "/"+bucket+"/k"), func(g1 *testGateway) rawResult {
		return putRaw(g1.Endpoint, bucket, "k", cut, nil)
	})
	as := attemptsOf(t, bucket, "k")
	guard := as[len(as)-1]
	if guard.State != "unknown" {
		t.Fatalf("attempts after the cut: %+v, want the last unknown", as)
	}
	if r := putRaw(g.Endpoint, bucket, "k", []byte("other bytes"), nil); r.Status != 200 {
		t.Fatalf("PUT: %+v", r)
	}
	if r := putRaw(g.Endpoint, bucket, "k", first, nil); r.Status != 200 {
		t.Fatalf("identical re-upload: %+v", r)
	}
	if d := attemptDetailOf(t, guard.ID); d.state != "unknown" {
		t.Fatalf("after a commit of the ETag it was fenced on, the cut PUT is %s (%s), want unknown", d.state, d.reason)
	}
	held.ReleaseDetached()
	if st := delivered(t, held); st != 200 {
		t.Fatalf("the cut PUT reached the store, which answered %d", st)
	}
	reconcileOnce(t, g)
	audit(t, g.Store, bucket, "k")
	if s := attemptState(t, guard.ID); s != "adopted" {
		t.Fatalf("the cut PUT is %s, want adopted", s)
	}
}

// A client's If-Match: * on a DELETE excludes nothing a later PUT does: the
// cut DELETE stays a guard, and when it lands after the PUT committed, the
// catalog learns that the key is gone.
func TestClientMatchAnyDeleteKeepsGuard(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-matchany-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	if r := putRaw(g.Endpoint, bucket, "k", []byte("to be deleted"), nil); r.Status != 200 {
		t.Fatalf("PUT: %+v", r)
	}
	held := cutHeldWrite(t, fp, fep, faultproxy.MethodPath("DELETE", "/"+bucket+"/k"), func(g1 *testGateway) rawResult {
		return doRaw(g1.Endpoint, "DELETE", "/"+bucket+"/k", nil, map[string]string{"If-Match": "*"})
	})
	as := attemptsOf(t, bucket, "k")
	guard := as[len(as)-1]
	if guard.Op != "delete" || guard.State != "unknown" {
		t.Fatalf("attempts after the cut: %+v, want the DELETE unknown", as)
	}
	if r := putRaw(g.Endpoint, bucket, "k", []byte("written after the cut delete"), nil); r.Status != 200 {
		t.Fatalf("PUT: %+v", r)
	}
	if d := attemptDetailOf(t, guard.ID); d.state != "unknown" {
		t.Fatalf("after a later PUT the cut If-Match: * DELETE is %s (%s), want unknown", d.state, d.reason)
	}
	held.ReleaseDetached()
	if st := delivered(t, held); st != 204 {
		t.Fatalf("the cut DELETE reached the store, which answered %d", st)
	}
	reconcileOnce(t, g)
	audit(t, g.Store, bucket, "k")
	if row, ok := catalogOf(t, bucket, "k"); !ok || !row.Deleted {
		t.Fatalf("catalog after the late DELETE: %+v (known %v), want deleted", row, ok)
	}
}

// A write to a bucket the store does not have answers 404 NoSuchBucket, as S3
// does, with nothing left leased: not 503 SlowDown, which clients retry as
// if the key were busy (issue 27, item 8).
func TestWriteToMissingBucket(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-nobucket-" + randomSuffix()
	for _, w := range []struct {
		name   string
		method string
		header map[string]string
	}{
		{"PUT", "PUT", nil},
		{"copy", "PUT", map[string]string{"x-amz-copy-source": "/" + bucket + "/src"}},
		{"DELETE", "DELETE", nil},
	} {
		r := doRaw(g.Endpoint, w.method, "/"+bucket+"/k", []byte("body"), w.header)
		if r.Status != 404 || r.Code != "NoSuchBucket" {
			t.Errorf("%s to a missing bucket: %+v, want 404 NoSuchBucket", w.name, r)
		}
		if !leaseExpiredOrFree(t, bucket, "k") {
			t.Errorf("%s to a missing bucket left the key leased", w.name)
		}
	}
}

// leaseExpiredOrFree: the key has no lease row, or one nobody holds live.
func leaseExpiredOrFree(t *testing.T, bucket, key string) bool {
	t.Helper()
	var held int
	if err := packageKeys(t).Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM leases WHERE bucket = $1 AND key = $2 AND holder IS NOT NULL AND expires_at > clock_timestamp()`,
		bucket, key).Scan(&held); err != nil {
		t.Fatal(err)
	}
	return held == 0
}

// A versioned DELETE answered 5xx may have removed the version: its attempt
// is left unknown (a guard), never failed (issue 27, item 7).
func TestVersionedDelete5xxIsUnknown(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-verdel5xx-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	if r := doRaw(g.Endpoint, "PUT", "/"+bucket+"?versioning",
		[]byte(`<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>`), nil); r.Status != 200 {
		t.Fatalf("enable versioning: %+v", r)
	}
	r := putRaw(g.Endpoint, bucket, "k", []byte("a version"), nil)
	if r.Status != 200 {
		t.Fatalf("PUT: %+v", r)
	}
	version := headVersionID(t, g.Store, bucket, "k")
	fp.Fail(faultproxy.MethodPath("DELETE", "/"+bucket+"/k"), 1, 503, "")
	if r := doRaw(g.Endpoint, "DELETE", "/"+bucket+"/k?versionId="+version, nil, nil); r.Status != 503 {
		t.Fatalf("versioned DELETE through a failing store: %+v, want the store's 503", r)
	}
	as := attemptsOf(t, bucket, "k")
	if last := as[len(as)-1]; last.Op != "delete" || last.State != "unknown" {
		t.Fatalf("attempts %+v: the versioned DELETE answered 503 is %s, want unknown", as, last.State)
	}
}

// headVersionID is the current version id of key, straight from the store.
func headVersionID(t *testing.T, store stack.Endpoint, bucket, key string) string {
	t.Helper()
	out, err := store.S3Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	if out.VersionId == nil || *out.VersionId == "" {
		t.Fatal("the store gave no version id")
	}
	return *out.VersionId
}
