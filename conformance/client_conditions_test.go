package conformance

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/faultproxy"
)

// A client's own conditions hold at the store as the client wrote them, and
// what fencegate records is what the store did (issue 27, item 7).

// deleteResult is a DeleteObjects answer, by key.
type deleteResult struct {
	Deleted []struct{ Key string }       `xml:"Deleted"`
	Errors  []struct{ Key, Code string } `xml:"Error"`
}

// outcomeOf is what a DeleteObjects answer says of key: "deleted", an error
// code, or "" if it names the key nowhere.
func (d deleteResult) outcomeOf(key string) string {
	for _, e := range d.Deleted {
		if e.Key == key {
			return "deleted"
		}
	}
	for _, e := range d.Errors {
		if e.Key == key {
			return e.Code
		}
	}
	return ""
}

func deleteObjectsRaw(t *testing.T, g *testGateway, bucket, doc string) deleteResult {
	t.Helper()
	body := []byte(doc)
	r, b := doRawBody(g.Endpoint, "POST", "/"+bucket+"/?delete", body, map[string]string{"Content-MD5": md5b64(body)})
	if r.Status != 200 {
		t.Fatalf("DeleteObjects: %+v", r)
	}
	var d deleteResult
	if err := xml.Unmarshal(b, &d); err != nil {
		t.Fatalf("DeleteObjects answer %q: %v", b, err)
	}
	return d
}

// storeETag is key's ETag at the store, "" if it is absent.
func storeETag(t *testing.T, g *testGateway, bucket, key string) string {
	t.Helper()
	out, err := g.Store.S3Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(key)})
	if err != nil {
		if strings.Contains(err.Error(), "NotFound") || strings.Contains(err.Error(), "NoSuchKey") {
			return ""
		}
		t.Fatal(err)
	}
	return trimQuotes(aws.ToString(out.ETag))
}

// A DeleteObjects entry with <ETag> deletes the key only if the key is at
// that ETag, as S3 conditions it (the entry's If-Match): otherwise the entry
// is an <Error> PreconditionFailed and the key stays. The key's state is the
// store's, not the catalog's: bytes written around the gateway after the
// catalog's generation fail the condition too.
func TestDeleteObjectsEntryETagCondition(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-dobetag-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	for _, k := range []string{"wrong", "right", "around", "star"} {
		putThrough(t, g, bucket, k, "bytes of "+k, 200)
	}
	catalogETag := storeETag(t, g, bucket, "around")
	// Bytes written straight at the store: the catalog still says catalogETag.
	putRaw(g.Store, bucket, "around", []byte("written around the gateway"), nil)
	d := deleteObjectsRaw(t, g, bucket, `<Delete>`+
		`<Object><Key>wrong</Key><ETag>"00000000000000000000000000000000"</ETag></Object>`+
		`<Object><Key>right</Key><ETag>"`+storeETag(t, g, bucket, "right")+`"</ETag></Object>`+
		`<Object><Key>around</Key><ETag>"`+catalogETag+`"</ETag></Object>`+
		`<Object><Key>star</Key><ETag>*</ETag></Object>`+
		`</Delete>`)
	for key, want := range map[string]string{"wrong": "PreconditionFailed", "right": "deleted", "around": "PreconditionFailed", "star": "deleted"} {
		if got := d.outcomeOf(key); got != want {
			t.Errorf("entry %s: %q, want %q", key, got, want)
		}
	}
	for key, present := range map[string]bool{"wrong": true, "right": false, "around": true, "star": false} {
		if got := storeETag(t, g, bucket, key) != ""; got != present {
			t.Errorf("after the DeleteObjects, %s present at the store: %v, want %v", key, got, present)
		}
	}
	audit(t, g.Store, bucket, "wrong", "right", "around", "star")
}

// catalogSize is the size the catalog records for key's live generation.
func catalogSize(t *testing.T, bucket, key string) int64 {
	t.Helper()
	var n int64
	if err := packageKeys(t).Pool.QueryRow(context.Background(),
		`SELECT coalesce(size, -1) FROM catalog WHERE bucket = $1 AND key = $2 AND NOT deleted`, bucket, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A copy whose x-amz-copy-source-if-match allows the version fencegate read
// (a list naming it, or *) is pinned to that version: when the source changes
// between fencegate's HEAD and the copy, the copy of other bytes never lands
// under the size fencegate read. Either the copy is refused (and the
// client's retry copies the source as it is then), or what landed is
// recorded with its own size.
func TestCopySourceConditionListPinsSource(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	for _, tc := range []struct{ name, cond string }{
		{"list", `"00000000000000000000000000000000", "%s", "%s"`},
		{"star", `*`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bucket := "t-cpypin-" + randomSuffix()
			createBucket(t, g.Endpoint, bucket)
			first := []byte("the source fencegate reads")
			later := []byte("the source as it is when the copy reaches the store: longer")
			putThrough(t, g, bucket, "src", string(first), 200)
			sum := md5.Sum(later)
			cond := tc.cond
			if strings.Contains(cond, "%s") {
				cond = strings.Replace(cond, "%s", storeETag(t, g, bucket, "src"), 1)
				cond = strings.Replace(cond, "%s", hex.EncodeToString(sum[:]), 1)
			}
			held := fp.Hold(faultproxy.MethodPath("PUT", "/"+bucket+"/dst"), 1)
			res := make(chan rawResult, 1)
			go func() {
				res <- doRaw(g.Endpoint, "PUT", "/"+bucket+"/dst", nil, map[string]string{
					"x-amz-copy-source": "/" + bucket + "/src", "x-amz-copy-source-if-match": cond})
			}()
			<-held.Arrived
			putThrough(t, g, bucket, "src", string(later), 200)
			held.Release()
			r := <-res
			t.Logf("the copy answered %+v", r)
			if r.Status == 200 {
				out, err := g.Store.S3Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("dst")})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := catalogSize(t, bucket, "dst"), aws.ToInt64(out.ContentLength); got != want {
					t.Errorf("the catalog records size %d for a copy of %d bytes", got, want)
				}
			} else if got := storeETag(t, g, bucket, "dst"); got != "" {
				t.Errorf("the copy answered %+v, and the store holds %s at its destination", r, got)
			}
			audit(t, g.Store, bucket, "src", "dst")
			// The client's retry copies the source as it is now.
			if r.Status != 200 {
				if r := doRaw(g.Endpoint, "PUT", "/"+bucket+"/dst", nil, map[string]string{
					"x-amz-copy-source": "/" + bucket + "/src", "x-amz-copy-source-if-match": cond}); r.Status != 200 {
					t.Fatalf("the retried copy: %+v", r)
				}
				if got := getBody(t, g.Store, bucket, "dst"); !bytes.Equal(got, later) {
					t.Fatalf("the retried copy holds %q", got)
				}
				if got := catalogSize(t, bucket, "dst"); got != int64(len(later)) {
					t.Errorf("the catalog records size %d for the retried copy of %d bytes", got, len(later))
				}
			}
		})
	}
}

// newUploadOfOnePart creates a multipart upload of key through g with one
// part, and returns a raw Complete of it through any gateway.
func newUploadOfOnePart(t *testing.T, g *testGateway, bucket, key string) (complete func(g *testGateway) rawResult) {
	t.Helper()
	ctx := context.Background()
	c := g.S3Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String(key), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("the upload's bytes"))})
	if err != nil {
		t.Fatal(err)
	}
	body := `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + *part.ETag + `</ETag></Part></CompleteMultipartUpload>`
	return func(g *testGateway) rawResult {
		return doRaw(g.Endpoint, "POST", "/"+bucket+"/"+key+"?uploadId="+*up.UploadId, []byte(body), nil)
	}
}

// A Complete retry whose settle adopts the earlier try that landed answers
// as published, with the generation the adoption made.
func TestCompleteRetryAfterEarlierTryLanded(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	bucket := "t-cretry-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	complete := newUploadOfOnePart(t, g, bucket, "k")
	held := cutHeldWrite(t, fp, fep, faultproxy.MethodPath("POST", "/"+bucket+"/k"), complete)
	held.ReleaseDetached()
	if st := delivered(t, held); st != 200 {
		t.Fatalf("the first try reached the store, which answered %d", st)
	}
	r := complete(g)
	gens := generationsOf(t, bucket, "k")
	if len(gens) != 1 || gens[0].Origin != "adopted" {
		t.Fatalf("generations %+v: want the first try's landing adopted", gens)
	}
	if r.Status != 200 || r.Generation != gens[0].Generation {
		t.Fatalf("the retry answered %+v, want 200 with generation %d", r, gens[0].Generation)
	}
	audit(t, g.Store, bucket, "k")
}

// A Complete retry settled before the earlier try lands, and sent after it
// did: the store refuses the retry, on its fence (SeaweedFS) or because the
// upload is gone (a store that forgets a completed upload answers
// NoSuchUpload; the proxy answers so for it), and the retry, settling again,
// adopts the earlier try and answers as published: no second generation for
// one upload, never NoSuchUpload.
func TestCompleteRetryOvertakenByEarlierTry(t *testing.T) {
	fp, fep := faultStore(t)
	g := startGateway(t, gatewayOptions{Store: &fep})
	for _, tc := range []struct {
		name string
		send func(retry *faultproxy.Held)
	}{
		{"refused on its fence", func(retry *faultproxy.Held) { retry.Release() }},
		{"upload gone", func(retry *faultproxy.Held) {
			retry.Fail(404, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
				`<Error><Code>NoSuchUpload</Code><Message>The specified upload does not exist.</Message></Error>`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bucket := "t-cretry2-" + randomSuffix()
			createBucket(t, g.Endpoint, bucket)
			complete := newUploadOfOnePart(t, g, bucket, "k")
			first := cutHeldWrite(t, fp, fep, faultproxy.MethodPath("POST", "/"+bucket+"/k"), complete)
			retry := fp.Hold(faultproxy.MethodPath("POST", "/"+bucket+"/k"), 1)
			res := make(chan rawResult, 1)
			go func() { res <- complete(g) }()
			<-retry.Arrived
			first.ReleaseDetached()
			if st := delivered(t, first); st != 200 {
				t.Fatalf("the first try reached the store, which answered %d", st)
			}
			tc.send(retry)
			r := within(t, res, time.Minute, "answer to the retried Complete")
			gens := generationsOf(t, bucket, "k")
			if len(gens) != 1 || gens[0].Origin != "adopted" {
				t.Fatalf("generations %+v: want the first try's landing adopted, once", gens)
			}
			if r.Status != 200 || r.Generation != gens[0].Generation {
				t.Fatalf("the retry answered %+v, want 200 with generation %d", r, gens[0].Generation)
			}
			audit(t, g.Store, bucket, "k")
			if n := attemptStates(t, bucket, "k")["unknown"]; n != 0 {
				t.Errorf("%d attempts left unknown: %v", n, attemptStates(t, bucket, "k"))
			}
		})
	}
}
