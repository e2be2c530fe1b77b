package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/sigv4"
)

func newTestClient(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(Config{Endpoint: srv.URL, AccessKey: "a", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewRequestPath(t *testing.T) {
	c, err := New(Config{Endpoint: "http://store:8333/base/"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		level       Level
		bucket, key string
		want        string
	}{
		{LevelService, "", "", "/base/"},
		{LevelBucket, "b", "", "/base/b"},
		{LevelObject, "b", "a b/c+d%", "/base/b/a%20b/c%2Bd%25"},
	} {
		req, err := c.NewRequest(context.Background(), http.MethodGet, tc.level, tc.bucket, tc.key, "x=1")
		if err != nil || req.URL.Opaque != tc.want || req.URL.RawQuery != "x=1" ||
			req.URL.Scheme != "http" || req.URL.Host != "store:8333" || req.Host != "store:8333" || req.URL.RequestURI() != tc.want+"?x=1" {
			t.Errorf("%q/%q: %v %q, want %q", tc.bucket, tc.key, err, req.URL.Opaque, tc.want)
		}
	}
	// An object operation without a key must never become a bucket request.
	if _, err := c.NewRequest(context.Background(), http.MethodDelete, LevelObject, "b", "", ""); err == nil {
		t.Error("an object request without a key was built")
	}
}

func TestHead(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" || r.Header.Get("X-Amz-Content-Sha256") == "" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		switch r.URL.Path {
		case "/b/k":
			if r.Header.Get("X-Amz-Checksum-Mode") != "ENABLED" {
				t.Error("HEAD without x-amz-checksum-mode")
			}
			w.Header().Set("ETag", `"e1"`)
			w.Header().Set("Content-Length", "5")
			w.Header().Set(AttemptHeader, "att")
			w.Header().Set("X-Amz-Checksum-Crc32", "AAAAAA==")
		case "/b/two":
			w.Header().Set("ETag", `"e3"`)
			w.Header().Set("X-Amz-Checksum-Sha256", "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")
			w.Header().Set("X-Amz-Checksum-Crc32", "AAAAAA==")
		case "/b/multi":
			w.Header().Set("ETag", `"e2-2"`)
			w.Header().Set("X-Amz-Checksum-Crc32", "AAAAAA==-2")
		case "/b", "/b/absent", "/gone/k":
			if r.URL.Path == "/gone/k" || r.URL.Path == "/b/absent" {
				w.WriteHeader(http.StatusNotFound)
			}
		case "/gone":
			w.WriteHeader(http.StatusNotFound)
		default:
			w.WriteHeader(http.StatusBadRequest)
		}
	})
	ctx := context.Background()
	o, err := c.Head(ctx, "b", "k")
	if err != nil || !o.Exists || o.ETag != "e1" || o.Size != 5 || o.AttemptID != "att" || o.Checksum != "crc32:AAAAAA==" || o.Header == nil {
		t.Errorf("Head(b/k) = %+v, %v", o, err)
	}
	// Several checksums: every one is kept, in one order, so each is
	// compared with a checksum of its own algorithm (issue 27, item 10).
	for range 8 {
		if o, err := c.Head(ctx, "b", "two"); err != nil || o.Checksum != "crc32:AAAAAA== sha256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=" {
			t.Fatalf("Head(b/two) = %q, %v: want both checksums", o.Checksum, err)
		}
	}
	if o, err := c.Head(ctx, "b", "multi"); err != nil || o.Checksum != "" {
		t.Errorf("a composite checksum was taken for the object's: %+v, %v", o, err)
	}
	if o, err := c.Head(ctx, "b", "absent"); err != nil || o.Exists {
		t.Errorf("Head(b/absent) = %+v, %v", o, err)
	}
	if _, err := c.Head(ctx, "gone", "k"); err == nil || !strings.Contains(err.Error(), "no such bucket") {
		t.Errorf("a key in a missing bucket read as absent: %v", err)
	}
	var se *StatusError
	if _, err := c.HeadVersion(ctx, "b", "bad", "v1"); !errors.As(err, &se) || se.Status != http.StatusBadRequest {
		t.Errorf("HeadVersion(bad) = %v, want a StatusError 400", err)
	}
}

func TestListKeysPages(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("list-type") != "2" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.URL.Query().Get("continuation-token") == "" {
			fmt.Fprint(w, `<ListBucketResult><Contents><Key>a</Key></Contents><Contents><Key>b</Key></Contents><IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1</NextContinuationToken></ListBucketResult>`)
			return
		}
		if r.URL.Query().Get("continuation-token") != "t&1" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `<Error><Code>InvalidArgument</Code><Message> bad token </Message></Error>`)
			return
		}
		fmt.Fprint(w, `<ListBucketResult><Contents><Key>c</Key></Contents><IsTruncated>false</IsTruncated></ListBucketResult>`)
	})
	var got []string
	err := c.ListKeys(context.Background(), "b", func(keys []string) error {
		got = append(got, keys...)
		return nil
	})
	if err != nil || strings.Join(got, ",") != "a,b,c" {
		t.Errorf("ListKeys = %v, %v", got, err)
	}
}

func TestListPage(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("list-type") != "2" || q.Get("max-keys") != "2" || q.Get("prefix") != "p/" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if q.Get("continuation-token") == "" {
			fmt.Fprint(w, `<ListBucketResult><Contents><Key>p/a</Key><ETag>"e1"</ETag><Size>3</Size></Contents><IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1</NextContinuationToken></ListBucketResult>`)
			return
		}
		fmt.Fprint(w, `<ListBucketResult><Contents><Key>p/c</Key><ETag>"e2"</ETag><Size>4</Size></Contents><IsTruncated>false</IsTruncated></ListBucketResult>`)
	})
	ctx := context.Background()
	p, err := c.ListPage(ctx, "b", "p/", "", 2)
	if err != nil || len(p.Objects) != 1 || p.Objects[0] != (Listed{"p/a", "e1", 3}) || p.Next != "t&1" {
		t.Fatalf("first page %+v, %v", p, err)
	}
	p, err = c.ListPage(ctx, "b", "p/", p.Next, 2)
	if err != nil || len(p.Objects) != 1 || p.Objects[0].Key != "p/c" || p.Next != "" {
		t.Fatalf("last page %+v, %v", p, err)
	}
}

func TestMultipartUploadCalls(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodGet && q.Has("uploads"):
			if q.Get("key-marker") == "" {
				fmt.Fprint(w, `<ListMultipartUploadsResult><Upload><Key>k</Key><UploadId>u1</UploadId><Initiated>2026-01-02T03:04:05.000Z</Initiated></Upload><IsTruncated>true</IsTruncated><NextKeyMarker>k</NextKeyMarker><NextUploadIdMarker>u1</NextUploadIdMarker></ListMultipartUploadsResult>`)
				return
			}
			fmt.Fprint(w, `<ListMultipartUploadsResult><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>`)
		case r.Method == http.MethodGet && q.Get("uploadId") == "u1":
			if q.Get("part-number-marker") == "" {
				fmt.Fprint(w, `<ListPartsResult><Part><PartNumber>1</PartNumber><LastModified>2026-01-02T03:04:05.000Z</LastModified></Part><IsTruncated>true</IsTruncated><NextPartNumberMarker>1</NextPartNumberMarker></ListPartsResult>`)
				return
			}
			fmt.Fprint(w, `<ListPartsResult><Part><PartNumber>2</PartNumber><LastModified>2026-01-03T00:00:00Z</LastModified></Part><IsTruncated>false</IsTruncated></ListPartsResult>`)
		case r.Method == http.MethodDelete && q.Get("uploadId") == "u1":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `<Error><Code>NoSuchUpload</Code></Error>`)
		}
	})
	ctx := context.Background()
	p, err := c.ListMultipartUploads(ctx, "b", "", "", 10)
	if err != nil || len(p.Uploads) != 1 || p.Uploads[0].UploadID != "u1" || p.Uploads[0].Initiated.Year() != 2026 || p.NextKey != "k" || p.NextUploadID != "u1" {
		t.Fatalf("uploads %+v, %v", p, err)
	}
	if p, err = c.ListMultipartUploads(ctx, "b", p.NextKey, p.NextUploadID, 10); err != nil || len(p.Uploads) != 0 || p.NextKey != "" {
		t.Fatalf("last uploads page %+v, %v", p, err)
	}
	last, n, err := c.LastPart(ctx, "b", "k", "u1")
	if err != nil || n != 2 || last.Day() != 3 {
		t.Fatalf("LastPart = %v, %d, %v", last, n, err)
	}
	if err := c.AbortMultipartUpload(ctx, "b", "k", "u1"); err != nil {
		t.Fatal(err)
	}
	if err := c.AbortMultipartUpload(ctx, "b", "k", "u2"); !errors.Is(err, ErrNoSuchUpload) {
		t.Fatalf("abort of an unknown upload: %v", err)
	}
	if _, _, err := c.LastPart(ctx, "b", "k", "u2"); !errors.Is(err, ErrNoSuchUpload) {
		t.Fatalf("parts of an unknown upload: %v", err)
	}
}

// KeyUploads lists one key's uploads with the key as prefix, across pages,
// and stops at the first longer key the prefix also matches.
func TestKeyUploads(t *testing.T) {
	var requests int
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		requests++
		q := r.URL.Query()
		if !q.Has("uploads") || q.Get("prefix") != "a b+c" {
			t.Errorf("request %s, want ListMultipartUploads with prefix %q", r.URL.RawQuery, "a b+c")
		}
		switch q.Get("key-marker") {
		case "":
			fmt.Fprint(w, `<ListMultipartUploadsResult><Upload><Key>a b+c</Key><UploadId>u1</UploadId><Initiated>2026-12-01T14:57:49Z</Initiated></Upload><IsTruncated>true</IsTruncated><NextKeyMarker>a b+c</NextKeyMarker><NextUploadIdMarker>u1</NextUploadIdMarker></ListMultipartUploadsResult>`)
		case "a b+c":
			if q.Get("upload-id-marker") != "u1" {
				t.Errorf("second page after upload %q, want u1", q.Get("upload-id-marker"))
			}
			fmt.Fprint(w, `<ListMultipartUploadsResult><Upload><Key>a b+c</Key><UploadId>u2</UploadId><Initiated>2026-12-01T14:57:50Z</Initiated></Upload><Upload><Key>a b+cd</Key><UploadId>u3</UploadId><Initiated>2026-12-01T14:57:50Z</Initiated></Upload><IsTruncated>true</IsTruncated><NextKeyMarker>a b+cd</NextKeyMarker><NextUploadIdMarker>u3</NextUploadIdMarker></ListMultipartUploadsResult>`)
		default:
			t.Errorf("a page past the key was read: %s", r.URL.RawQuery)
			fmt.Fprint(w, `<ListMultipartUploadsResult><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>`)
		}
	})
	ups, err := c.KeyUploads(context.Background(), "b", "a b+c")
	if err != nil || len(ups) != 2 || ups[0].UploadID != "u1" || ups[1].UploadID != "u2" || ups[1].Initiated.Second() != 50 || requests != 2 {
		t.Fatalf("KeyUploads = %+v, %v after %d requests; want u1 and u2 in 2 requests", ups, err, requests)
	}
}

// After the store closed every idle connection (a quiet spell past its idle
// timeout), a GET still gets through: the stale pooled connection it took
// first is retried on a newly dialled one, not on another stale one.
func TestGetAfterStoreClosedIdleConnections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("body"))
	}))
	t.Cleanup(srv.Close)
	p := newConnPool(strings.TrimPrefix(srv.URL, "http://"), 0)
	get := func() error {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.URL+"/b/k", nil)
		resp, err := p.roundTrip(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && string(b) != "body" {
			err = fmt.Errorf("body %q", b)
		}
		return err
	}
	// Three connections in the pool: three GETs open at once, then each
	// read through (which gives its connection back).
	var open []*http.Response
	for range 3 {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.URL+"/b/k", nil)
		resp, err := p.roundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, resp)
	}
	for _, resp := range open {
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if n := len(p.idle); n != 3 {
		t.Fatalf("%d idle connections, want 3", n)
	}
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond) // the closes reach this side
	if err := get(); err != nil {
		t.Fatalf("a GET after the store closed its idle connections: %v", err)
	}
}

// A TLS store that takes the connection and never finishes the handshake is
// given up within the answer timeout (net/http's transport has no handshake
// bound of its own when built by hand), as one that never answers is.
func TestTLSStoreThatNeverShakesHandsIsGivenUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accepts, reads the ClientHello, answers nothing
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	const answer = time.Second
	c, err := New(Config{Endpoint: "https://" + ln.Addr().String(), AccessKey: "a", SecretKey: "s", AnswerTimeout: answer})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := c.Head(context.Background(), "b", "k")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || time.Since(start) > 5*answer {
			t.Fatalf("HEAD: %v after %v", err, time.Since(start))
		}
		t.Logf("HEAD: %v after %v", err, time.Since(start).Round(10*time.Millisecond))
	case <-time.After(20 * answer):
		t.Fatalf("HEAD still waiting on the handshake after %v", 20*answer)
	}
}

// An https store: a large PUT through the transport (TLS over a watched
// copyConn) arrives whole, and a GET reads it back, on one connection.
func TestTLSStoreRoundTrip(t *testing.T) {
	var stored []byte
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			stored = b
		case http.MethodGet:
			_, _ = w.Write(stored)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c, err := New(Config{Endpoint: srv.URL, AccessKey: "a", SecretKey: "s", InsecureTLS: true, AnswerTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB: many writes, each watched
	req, err := c.NewRequest(context.Background(), http.MethodPut, LevelObject, "b", "k", "")
	if err != nil {
		t.Fatal(err)
	}
	req.Body = io.NopCloser(struct{ io.Reader }{bytes.NewReader(payload)})
	req.ContentLength = int64(len(payload))
	resp, err := c.Send(req, "UNSIGNED-PAYLOAD")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(stored, payload) {
		t.Fatalf("PUT: status %d, the store got %d of %d bytes", resp.StatusCode, len(stored), len(payload))
	}
	req, err = c.NewRequest(context.Background(), http.MethodGet, LevelObject, "b", "k", "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err = c.Send(req, sigv4.EmptySHA256)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("GET: %d of %d bytes, %v", len(got), len(payload), err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections to the store for two requests in a row", n)
	}
}
