package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/store"
)

// staticKeys is a KeySource with fixed keys: these tests need no database.
type staticKeys []AccessKey

func (k staticKeys) LoadKeys(context.Context) ([]AccessKey, int64, error) { return k, 1, nil }
func (k staticKeys) KeysVersion(context.Context) (int64, error)           { return 1, nil }

var testKey = AccessKey{ID: "FGTESTKEY00000000000", Secret: "test-secret-0000000000000000000000000000", Grants: []Grant{{Bucket: "*", Perm: PermAdmin}}}

// noCatalog is a bucket record with no database behind it.
type noCatalog struct{}

var errNoCatalog = errors.New("unit tests have no catalog")

func (noCatalog) BucketCreated(context.Context, string) error { return errNoCatalog }
func (noCatalog) BucketDeleted(context.Context, string) error { return errNoCatalog }

// unitServer is a gateway in front of a store address nothing listens on, and
// with no database behind its write protocol (a lease manager without a
// driver): these tests send no keyed write, and what they send is refused or
// limited before any store request, or fails to reach the store (503
// ServiceUnavailable).
type unitServer struct {
	*Server
	url, admin string
}

func startUnitServer(t *testing.T, configure func(*Config), checks ...Check) *unitServer {
	t.Helper()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	storeAddr := dead.Addr().String()
	dead.Close()
	cfg := Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", ShutdownGrace: 2 * time.Second,
		Store: store.Config{Endpoint: "http://" + storeAddr, AccessKey: "x", SecretKey: "y"},
	}
	if configure != nil {
		configure(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("FENCEGATE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	s, err := New(context.Background(), cfg, Deps{Log: log, Keys: staticKeys{testKey}, Readiness: checks,
		Leases: lease.NewManager(lease.Config{}, nil, nil), Buckets: noCatalog{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &unitServer{Server: s, url: "http://" + s.Addr(), admin: "http://" + s.AdminAddr()}
}

// signed builds a header-signed request with an unsigned payload.
func signed(t *testing.T, method, url string, body io.Reader, size int64) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	creds := aws.Credentials{AccessKeyID: testKey.ID, SecretAccessKey: testKey.Secret}
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := signer.SignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return req
}

func randomWord(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))[:n]
}

func getText(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
