package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/faultproxy"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// faultStore puts a fault proxy in front of the run's store.
func faultStore(t *testing.T) (*faultproxy.HTTP, stack.Endpoint) {
	t.Helper()
	return proxyFor(t, testenv.Store(t))
}

// faultDatabase puts a TCP fault proxy in front of the package's PostgreSQL
// and returns it with a URL of the package database through it.
func faultDatabase(t *testing.T) (*faultproxy.TCP, string) {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.NewTCP(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	return p, u.String()
}

// rawResult is what a raw request got: a status, or a transport error.
type rawResult struct {
	Status     int
	Code       string
	Generation int64
	ETag       string
	Err        error
}

// doRaw sends one signed request with a body, once (no SDK retries).
func doRaw(ep stack.Endpoint, method, path string, body []byte, header map[string]string) rawResult {
	res, _ := doRawBody(ep, method, path, body, header)
	return res
}

// doRawBody is doRaw returning the answer's body too.
func doRawBody(ep stack.Endpoint, method, path string, body []byte, header map[string]string) (rawResult, []byte) {
	req, err := http.NewRequest(method, ep.URL+path, bytes.NewReader(body))
	if err != nil {
		return rawResult{Err: err}, nil
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	creds := aws.Credentials{AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey}
	if err := s3Signer().SignHTTP(context.Background(), creds, req, hash, "s3", "us-east-1", time.Now()); err != nil {
		return rawResult{Err: err}, nil
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		return rawResult{Err: err}, nil
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	res := rawResult{Status: resp.StatusCode, ETag: trimQuotes(resp.Header.Get("ETag"))}
	res.Generation, _ = strconv.ParseInt(resp.Header.Get("X-Fencegate-Generation"), 10, 64)
	if resp.StatusCode >= 300 {
		res.Code = string(b)
		if i, j := bytes.Index(b, []byte("<Code>")), bytes.Index(b, []byte("</Code>")); i >= 0 && j > i {
			res.Code = string(b[i+6 : j])
		}
	}
	return res, b
}

func putRaw(ep stack.Endpoint, bucket, key string, body []byte, header map[string]string) rawResult {
	return doRaw(ep, "PUT", "/"+bucket+"/"+key, body, header)
}

func createBucket(t *testing.T, ep stack.Endpoint, bucket string) {
	t.Helper()
	if _, err := ep.S3Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
}

func getBody(t *testing.T, ep stack.Endpoint, bucket, key string) []byte {
	t.Helper()
	out, err := ep.S3Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return readAllClose(t, out.Body)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitNotAccepting waits until a gateway that began shutting down refuses new
// connections.
func waitNotAccepting(t *testing.T, g *testGateway) {
	t.Helper()
	addr := strings.TrimPrefix(g.URL, "http://")
	waitFor(t, "the gateway to stop accepting connections", 5*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
}

// signal is a one-shot barrier a hook closes and a test waits on.
type signal struct{ ch chan struct{} }

func newSignal() *signal { return &signal{ch: make(chan struct{}, 1)} }
func (s *signal) fire() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}
func (s *signal) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func leaseExpired(t *testing.T, bucket, key string) bool {
	var expired bool
	err := packageKeys(t).Pool.QueryRow(context.Background(),
		`SELECT coalesce(expires_at <= clock_timestamp(), true) FROM leases WHERE bucket = $1 AND key = $2`, bucket, key).Scan(&expired)
	return err == nil && expired
}

func attemptsOf(t *testing.T, bucket, key string) []struct{ ID, State, Op string } {
	t.Helper()
	rows, err := packageKeys(t).Pool.Query(context.Background(), `SELECT attempt_id::text, state, op FROM attempts WHERE bucket = $1 AND key = $2 ORDER BY created_at`, bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	var out []struct{ ID, State, Op string }
	for rows.Next() {
		var a struct{ ID, State, Op string }
		if err := rows.Scan(&a.ID, &a.State, &a.Op); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// within receives from ch, or fails the test after d: a test waits for
// nothing without a bound, so a broken protocol fails it instead of hanging
// it.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %s", what, d)
	}
	var zero T
	return zero
}
