package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/sigv4"
)

// Object is what a HEAD found at a key.
type Object struct {
	Exists    bool
	ETag      string // without quotes
	Size      int64
	AttemptID string // fencegate's attribution metadata (AttemptHeader), "" if none
	// Checksum is the object's full checksums as the store reports them,
	// each written as ChecksumValue writes it ("crc32:<base64>"), sorted and
	// separated by spaces (a store may report several); "" if it reports
	// none.
	Checksum string
	// Header is the whole answer (a copy restates some of it); nil when the
	// key holds nothing.
	Header http.Header
	// Directory: the key ("d/") holds no object, but the store's own
	// directory entry for keys under it, or left by them (DirectoryEntry);
	// Exists is false.
	Directory bool
}

// emptyUploadETag is the ETag of a multipart upload of no parts, which S3
// never publishes (a Complete names at least one part).
const emptyUploadETag = "d41d8cd98f00b204e9800998ecf8427e-0"

// DirectoryEntry reports a HEAD's (or GET's) 200 for "d/" that is a store's directory,
// not an object: SeaweedFS, which keeps keys as file paths, makes "d/" a
// directory for the keys under it (and keeps it after the last of them is
// deleted), answers a HEAD or GET of it with an empty body, the ETag of an
// empty upload and the content type application/x-directory, and lists no
// such key; S3 holds nothing there. A marker "d/" written as an object is
// listed and answers with its own ETag (docs/PROTOCOL.md, "Known limits").
func DirectoryEntry(key string, h http.Header) bool {
	return strings.HasSuffix(key, "/") && TrimETag(h.Get("ETag")) == emptyUploadETag &&
		h.Get("Content-Length") == "0" && h.Get("Content-Type") == "application/x-directory"
}

// ChecksumHeaders are the x-amz-checksum-* headers that carry a checksum, each
// with the length of its base64 value.
var ChecksumHeaders = map[string]int{
	"x-amz-checksum-crc32": 8, "x-amz-checksum-crc32c": 8, "x-amz-checksum-crc64nvme": 12,
	"x-amz-checksum-sha1": 28, "x-amz-checksum-sha256": 44,
}

// ChecksumValue writes a checksum header's value as Object.Checksum and the
// catalog record it: "crc32:<base64>" for x-amz-checksum-crc32.
func ChecksumValue(header, value string) string {
	return strings.TrimPrefix(header, "x-amz-checksum-") + ":" + value
}

// TrimETag is an ETag without its quotes.
func TrimETag(s string) string { return strings.Trim(strings.TrimSpace(s), `"`) }

// StatusError is a store answer that is neither the object nor its absence
// (a bad version id, a refusal, a 5xx).
type StatusError struct {
	Status int
	What   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: store answered %d %s", e.What, e.Status, http.StatusText(e.Status))
}

// ErrNoSuchBucket: the store has no bucket of that name (a HEAD's 404 that
// is not an absent key).
var ErrNoSuchBucket = errors.New("the store has no such bucket")

// Head reports what the store holds at a key and who wrote it.
func (c *Client) Head(ctx context.Context, bucket, key string) (Object, error) {
	return c.HeadVersion(ctx, bucket, key, "")
}

// HeadVersion is Head of one version of a key ("": the current one). A 404
// for a key whose bucket is missing is an error, never an absent key.
func (c *Client) HeadVersion(ctx context.Context, bucket, key, versionID string) (Object, error) {
	q := ""
	if versionID != "" {
		q = "versionId=" + url.QueryEscape(versionID)
	}
	req, err := c.NewRequest(ctx, http.MethodHead, LevelObject, bucket, key, q)
	if err != nil {
		return Object{}, err
	}
	// The object's stored checksum lets settling tell an unknown attempt's
	// landing from other bytes of the same size.
	req.Header.Set("X-Amz-Checksum-Mode", "ENABLED")
	resp, err := c.Send(req, sigv4.EmptySHA256)
	if err != nil {
		return Object{}, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if DirectoryEntry(key, resp.Header) {
			return Object{Directory: true}, nil
		}
		size, _ := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
		return Object{
			Exists:    true,
			ETag:      TrimETag(resp.Header.Get("ETag")),
			Size:      size,
			AttemptID: resp.Header.Get(AttemptHeader),
			Checksum:  storedChecksum(resp.Header),
			Header:    resp.Header,
		}, nil
	case http.StatusNotFound:
		// A HEAD's 404 does not say whether the key or the whole bucket is
		// missing. A missing bucket (deleted, or a store that is not the one
		// the catalog describes) must not be read as every key deleted.
		if key != "" {
			if ok, err := c.bucketExists(ctx, bucket); err != nil {
				return Object{}, err
			} else if !ok {
				return Object{}, fmt.Errorf("%w: %s", ErrNoSuchBucket, bucket)
			}
		}
		return Object{}, nil
	default:
		return Object{}, &StatusError{Status: resp.StatusCode, What: fmt.Sprintf("HEAD %s/%s", bucket, key)}
	}
}

// storedChecksum is the full-object checksums a HEAD reports, as the
// catalog records checksums ("crc32:<base64>"), all of them (sorted, space
// separated): which one an attempt's checksum is compared with is decided by
// its algorithm, never by the order of a map. A multipart object's composite
// checksum ("...-N") is not one a single body had, so it is left out.
func storedChecksum(h http.Header) string {
	var sums []string
	for name := range ChecksumHeaders {
		if v := strings.TrimSpace(h.Get(name)); v != "" && !strings.Contains(v, "-") {
			sums = append(sums, ChecksumValue(name, v))
		}
	}
	sort.Strings(sums)
	return strings.Join(sums, " ")
}

func (c *Client) bucketExists(ctx context.Context, bucket string) (bool, error) {
	req, err := c.NewRequest(ctx, http.MethodHead, LevelBucket, bucket, "", "")
	if err != nil {
		return false, err
	}
	resp, err := c.Send(req, sigv4.EmptySHA256)
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
