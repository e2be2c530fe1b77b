package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/internal/testenv"
)

// fencegateStatus is `fencegate status --json` with the env file's variables.
func fencegateStatus(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	cmd := exec.Command(fencegateBinary(t), "status", "--json")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "DATABASE_URL=" + testenv.DatabaseURL(t), "FENCEGATE_SERVER_KEY=" + serverKey}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("status: %v: %s", err, out)
	}
	return m
}

func deadLettersInStatus(t *testing.T, target string) int64 {
	var ts []struct {
		Name        string
		DeadLetters int64 `json:"dead_letters"`
	}
	if err := json.Unmarshal(fencegateStatus(t)["notification_targets"], &ts); err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		if x.Name == target {
			return x.DeadLetters
		}
	}
	t.Fatalf("status does not list target %s", target)
	return 0
}

// Events a target refuses --notify-max-tries times become dead letters,
// shown by `fencegate status`; `fencegate targets redrive` sends them again.
// Along the way: each write kind's event name, and prefix/suffix filters.
func TestNotifyDeadLettersAndRedrive(t *testing.T) {
	g := startGatewayProcess(t, testenv.Store(t), "FENCEGATE_NOTIFY_MAX_TRIES=3", "FENCEGATE_NOTIFY_RETRY=20ms",
		"FENCEGATE_NOTIFY_RETRY_MAX=50ms", "FENCEGATE_NOTIFY_POLL=50ms", "FENCEGATE_NOTIFY_TIMEOUT=1s")
	bucket := "t-notify-dl-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	var up atomic.Bool
	rcv := startFlakyReceiver(t, "", func(int64) (int, time.Duration) {
		if up.Load() {
			return 204, 0
		}
		return 503, 0
	})
	tg := addTarget(t, "webhook", "dl-"+randomSuffix(), "--url", "http://"+rcv.addr+"/")
	doc := notificationDoc(queueEntry("created", tg.ARN, "in/", "", "s3:ObjectCreated:*"),
		queueEntry("removed", tg.ARN, "", ".del", "s3:ObjectRemoved:Delete"))
	if res := doRaw(g.Endpoint, "PUT", "/"+bucket+"?notification", doc, nil); res.Status != 200 {
		t.Fatalf("configure: %d %s", res.Status, res.Code)
	}
	ctx := context.Background()
	c := g.S3Client()
	put := func(key string) {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(key), Body: bytes.NewReader([]byte(key))}); err != nil {
			t.Fatal(err)
		}
	}
	put("in/a")      // ObjectCreated:Put
	put("out/b")     // no rule
	put("out/x.del") // created outside in/: no rule
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String("in/c"), CopySource: aws.String(bucket + "/out/b")}); err != nil {
		t.Fatal(err)
	}
	mp, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("in/m")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String("in/m"), UploadId: mp.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("part"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: aws.String("in/m"), UploadId: mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"out/x.del", "in/a"} { // only the first matches the removed rule
		if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(k)}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"in/a ObjectCreated:Put", "in/c ObjectCreated:Copy", "in/m ObjectCreated:CompleteMultipartUpload", "out/x.del ObjectRemoved:Delete"}

	waitFor(t, "four dead letters", 30*time.Second, func() bool { return deadLettersInStatus(t, tg.Name) == 4 })
	if n := len(rcv.events()); n != 4*3 {
		t.Errorf("%d requests before the dead letters, want 4 events x 3 tries", n)
	}
	out, err := runTargets(t, "list", "--json")
	if err != nil || !strings.Contains(out, `"dead_letters":4`) {
		t.Errorf("targets list: %v %s", err, out)
	}

	up.Store(true)
	if out, err := runTargets(t, "redrive", tg.Name); err != nil || !strings.Contains(out, "4 dead letters") {
		t.Fatalf("redrive: %v %s", err, out)
	}
	waitFor(t, "the redriven events", 30*time.Second, func() bool { return queueEmpty(t, tg.Name) })
	var got []string
	for _, e := range rcv.events() {
		if e.Acked {
			got = append(got, e.Key+" "+e.Name)
		}
	}
	sort.Strings(got)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("delivered after the redrive:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := deadLettersInStatus(t, tg.Name); n != 0 {
		t.Fatalf("%d dead letters after the redrive", n)
	}
}

// An event whose tries fail past --notify-max-age becomes a dead letter
// though its tries are far from --notify-max-tries.
func TestNotifyMaxAge(t *testing.T) {
	g := startGatewayProcess(t, testenv.Store(t), "FENCEGATE_NOTIFY_MAX_TRIES=1000", "FENCEGATE_NOTIFY_MAX_AGE=1s",
		"FENCEGATE_NOTIFY_RETRY=100ms", "FENCEGATE_NOTIFY_RETRY_MAX=200ms", "FENCEGATE_NOTIFY_POLL=50ms")
	bucket := "t-notify-age-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	rcv := startFlakyReceiver(t, "", func(int64) (int, time.Duration) { return 503, 0 })
	tg := addTarget(t, "webhook", "age-"+randomSuffix(), "--url", "http://"+rcv.addr+"/")
	configureBucket(t, g.Endpoint, bucket, tg.ARN)
	if res := putRaw(g.Endpoint, bucket, "k", []byte("x"), nil); res.Status != 200 {
		t.Fatalf("PUT: %d", res.Status)
	}
	start := time.Now()
	waitFor(t, "the dead letter", 20*time.Second, func() bool { return deadLettersInStatus(t, tg.Name) == 1 })
	var tries int
	if err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT tries FROM notify_dead_letters WHERE target = $1`, tg.Name).Scan(&tries); err != nil {
		t.Fatal(err)
	}
	if tries < 2 || tries > 40 || len(rcv.events()) > tries {
		t.Fatalf("dead-lettered after %d tries (%d requests), want a few (1 s of 100-200 ms back-offs)", tries, len(rcv.events()))
	}
	t.Logf("dead-lettered %v after the PUT, after %d tries", time.Since(start).Round(time.Millisecond), tries)
}
