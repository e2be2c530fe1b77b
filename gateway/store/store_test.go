package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
		if err != nil || req.URL.Opaque != tc.want || req.URL.RawQuery != "x=1" {
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
