package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate/internal/testenv"
)

// The guard horizon's assumption, at its enforceable half (docs/DESIGN.md,
// "When a guard ends"): the test store refuses a write whose signature is
// older than its clock-skew window, so a request fencegate signed and that
// was held in the network past the window can no longer land. Measured, not
// assumed: a PUT signed 16 minutes ago is refused and writes nothing; one
// signed 14 minutes ago lands.
func TestStoreRefusesStaleSignatures(t *testing.T) {
	store := testenv.Store(t)
	bucket := "t-skew-" + randomSuffix()
	createBucket(t, store, bucket)
	put := func(key string, signedAgo time.Duration) (int, string) {
		t.Helper()
		body := []byte("signed " + signedAgo.String() + " ago")
		req, err := http.NewRequest("PUT", store.URL+"/"+bucket+"/"+key, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		hash := hex.EncodeToString(sum[:])
		req.Header.Set("X-Amz-Content-Sha256", hash)
		creds := aws.Credentials{AccessKeyID: store.AccessKey, SecretAccessKey: store.SecretKey}
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hash, "s3", "us-east-1", time.Now().Add(-signedAgo)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := put("fresh", 14*time.Minute); st != 200 {
		t.Fatalf("a PUT signed 14 minutes ago: %d %s, want it to land", st, body)
	}
	st, body := put("stale", 16*time.Minute)
	if st != 403 || !strings.Contains(body, "RequestTimeTooSkewed") {
		t.Fatalf("a PUT signed 16 minutes ago: %d %s, want 403 RequestTimeTooSkewed", st, body)
	}
	if _, _, ok := storeGet(t, store, bucket, "stale"); ok {
		t.Fatal("the stale PUT wrote the key")
	}
}
