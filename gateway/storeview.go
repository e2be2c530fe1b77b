package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/lease"
)

// storeView is the storage I/O the write protocol needs, over the backend.
type storeView struct{ b *backend }

// Head reports what the store holds at a key and who wrote it.
func (v storeView) Head(ctx context.Context, bucket, key string) (lease.Object, error) {
	var info objectInfo
	err := v.head(ctx, bucket, key, "", &info)
	return info.Object, err
}

// objectInfo is a HEAD's answer: the object, and the headers a copy restates.
type objectInfo struct {
	lease.Object
	Header http.Header
}

func (v storeView) head(ctx context.Context, bucket, key, versionID string, out *objectInfo) error {
	q := ""
	if versionID != "" {
		q = "versionId=" + url.QueryEscape(versionID)
	}
	req, err := v.b.newRequest(ctx, http.MethodHead, LevelObject, bucket, key, q)
	if err != nil {
		return err
	}
	// The object's stored checksum lets settling tell an unknown attempt's
	// landing from other bytes of the same size.
	req.Header.Set("X-Amz-Checksum-Mode", "ENABLED")
	resp, err := v.b.send(req, emptySHA256)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		out.Exists = true
		out.ETag = trimETag(resp.Header.Get("ETag"))
		out.Size, _ = strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
		out.AttemptID = resp.Header.Get(attemptHeader)
		out.Checksum = storedChecksum(resp.Header)
		out.Header = resp.Header
		return nil
	case http.StatusNotFound:
		// A HEAD's 404 does not say whether the key or the whole bucket is
		// missing. A missing bucket (deleted, or a store that is not the one
		// the catalog describes) must not be read as every key deleted.
		if key != "" {
			if ok, err := v.bucketExists(ctx, bucket); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("%w: %s", errNoSuchBucket, bucket)
			}
		}
		return nil
	default:
		return &storeStatusError{Status: resp.StatusCode, What: fmt.Sprintf("HEAD %s/%s", bucket, key)}
	}
}

// storedChecksum is the full-object checksum a HEAD reports, as the catalog
// records checksums ("crc32:<base64>"); a multipart object's composite
// checksum ("...-N") is not one a single body had, so it is left out.
func storedChecksum(h http.Header) string {
	for name := range checksumB64Len {
		if v := h.Get(name); v != "" && !strings.Contains(v, "-") {
			return checksumValue(name, v)
		}
	}
	return ""
}

// storeStatusError is a store answer that is neither the object nor its
// absence (a bad version id, a refusal, a 5xx).
type storeStatusError struct {
	Status int
	What   string
}

func (e *storeStatusError) Error() string {
	return fmt.Sprintf("%s: store answered %d %s", e.What, e.Status, http.StatusText(e.Status))
}

func trimETag(s string) string { return strings.Trim(strings.TrimSpace(s), `"`) }

var errNoSuchBucket = errors.New("the store has no such bucket")

func (v storeView) bucketExists(ctx context.Context, bucket string) (bool, error) {
	req, err := v.b.newRequest(ctx, http.MethodHead, LevelBucket, bucket, "", "")
	if err != nil {
		return false, err
	}
	resp, err := v.b.send(req, emptySHA256)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("HEAD bucket %s: store answered %s", bucket, resp.Status)
}
