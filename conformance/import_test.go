package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// `fencegate catalog import` records what a bucket already holds (written
// around the gateway) as external generations and marks the bucket complete.
func TestCatalogImport(t *testing.T) {
	store := testenv.Store(t)
	ctx := context.Background()
	bucket := "t-import-" + randomSuffix()
	c := store.S3Client()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range 25 {
		k := fmt.Sprintf("pre/%02d", i)
		keys = append(keys, k)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
			t.Fatal(err)
		}
	}
	packageKeys(t) // migrated
	cmd := exec.Command(fencegateBinary(t), "catalog", "import", bucket)
	cmd.Env = append(os.Environ(),
		"FENCEGATE_DATABASE_URL="+testenv.DatabaseURL(t), "FENCEGATE_SERVER_KEY="+serverKey,
		"FENCEGATE_BACKEND_ENDPOINT="+store.URL, "FENCEGATE_BACKEND_ACCESS_KEY_ID="+store.AccessKey,
		"FENCEGATE_BACKEND_SECRET_ACCESS_KEY="+store.SecretKey)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("catalog import: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "imported 25 keys") {
		t.Fatalf("output: %s", out)
	}
	for _, k := range keys {
		row, ok := catalogOf(t, bucket, k)
		if !ok || row.Origin != "external" || row.Deleted {
			t.Fatalf("%s: catalog %+v (%v)", k, row, ok)
		}
	}
	var complete bool
	if err := packageKeys(t).Pool.QueryRow(ctx, `SELECT complete FROM buckets WHERE bucket = $1`, bucket).Scan(&complete); err != nil || !complete {
		t.Fatalf("bucket complete=%v (%v)", complete, err)
	}
	audit(t, store, bucket, keys...)
}
