package store

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/sigv4"
)

// Listed is one object of a ListObjectsV2 page.
type Listed struct {
	Key  string
	ETag string // without quotes
	Size int64
}

// Page is one page of ListObjectsV2.
type Page struct {
	Objects []Listed
	// Next is the continuation marker for the next page; "" when this page
	// was the last.
	Next string
}

// ListPage lists one page of at most max keys of bucket under prefix,
// starting after the continuation marker after ("" for the start).
func (c *Client) ListPage(ctx context.Context, bucket, prefix, after string, max int) (Page, error) {
	// encoding-type=url: a key with a character XML 1.0 cannot carry
	// (U+0001-U+001F but tab, newline and return) is otherwise written as
	// U+FFFD by SeaweedFS, naming no object.
	q := "encoding-type=url&list-type=2&max-keys=" + strconv.Itoa(max)
	if prefix != "" {
		q += "&prefix=" + url.QueryEscape(prefix)
	}
	if after != "" {
		q += "&continuation-token=" + url.QueryEscape(after)
	}
	var page struct {
		Contents []struct {
			Key  string
			ETag string
			Size int64
		}
		IsTruncated           bool
		NextContinuationToken string
		EncodingType          string
	}
	if err := c.getXML(ctx, LevelBucket, bucket, "", q, &page); err != nil {
		return Page{}, fmt.Errorf("list %s: %w", bucket, err)
	}
	var p Page
	for _, o := range page.Contents {
		key, err := listedKey(page.EncodingType, o.Key)
		if err != nil {
			return Page{}, fmt.Errorf("list %s: %w", bucket, err)
		}
		p.Objects = append(p.Objects, Listed{Key: key, ETag: TrimETag(o.ETag), Size: o.Size})
	}
	if page.IsTruncated {
		p.Next = page.NextContinuationToken
	}
	return p, nil
}

// Upload is one multipart upload in progress, as ListMultipartUploads shows it.
type Upload struct {
	Key, UploadID string
	Initiated     time.Time
}

// UploadsPage is one page of ListMultipartUploads.
type UploadsPage struct {
	Uploads []Upload
	// NextKey, NextUploadID continue the listing; both "" after the last page.
	NextKey, NextUploadID string
}

// ListMultipartUploads lists one page (at most max) of bucket's uploads in
// progress, after the key and upload id markers ("" for the start).
func (c *Client) ListMultipartUploads(ctx context.Context, bucket, keyMarker, uploadMarker string, max int) (UploadsPage, error) {
	return c.listUploads(ctx, bucket, "", keyMarker, uploadMarker, max)
}

// KeyUploads lists the uploads in progress at exactly key: ListMultipartUploads
// with key as its prefix, page after page until the listing passes key (S3
// lists uploads in key order, and key sorts before every longer key it
// prefixes). Initiated is the store's (SeaweedFS gives whole seconds).
func (c *Client) KeyUploads(ctx context.Context, bucket, key string) ([]Upload, error) {
	var out []Upload
	km, um := "", ""
	for {
		p, err := c.listUploads(ctx, bucket, key, km, um, 1000)
		if err != nil {
			return nil, err
		}
		for _, u := range p.Uploads {
			if u.Key != key {
				return out, nil
			}
			out = append(out, u)
		}
		if p.NextKey == "" || (p.NextKey == km && p.NextUploadID == um) {
			return out, nil
		}
		km, um = p.NextKey, p.NextUploadID
	}
}

func (c *Client) listUploads(ctx context.Context, bucket, prefix, keyMarker, uploadMarker string, max int) (UploadsPage, error) {
	q := "encoding-type=url&max-uploads=" + strconv.Itoa(max)
	if prefix != "" {
		q += "&prefix=" + url.QueryEscape(prefix)
	}
	if keyMarker != "" {
		q += "&key-marker=" + url.QueryEscape(keyMarker)
		if uploadMarker != "" {
			q += "&upload-id-marker=" + url.QueryEscape(uploadMarker)
		}
	}
	q += "&uploads="
	var page struct {
		Upload []struct {
			Key       string
			UploadId  string
			Initiated string
		}
		IsTruncated        bool
		NextKeyMarker      string
		NextUploadIdMarker string
		EncodingType       string
	}
	if err := c.getXML(ctx, LevelBucket, bucket, "", q, &page); err != nil {
		return UploadsPage{}, fmt.Errorf("list uploads of %s: %w", bucket, err)
	}
	var p UploadsPage
	for _, u := range page.Upload {
		key, err := listedKey(page.EncodingType, u.Key)
		if err != nil {
			return UploadsPage{}, fmt.Errorf("list uploads of %s: %w", bucket, err)
		}
		at, _ := time.Parse(time.RFC3339Nano, u.Initiated)
		p.Uploads = append(p.Uploads, Upload{Key: key, UploadID: u.UploadId, Initiated: at})
	}
	if page.IsTruncated {
		next, err := listedKey(page.EncodingType, page.NextKeyMarker)
		if err != nil {
			return UploadsPage{}, fmt.Errorf("list uploads of %s: %w", bucket, err)
		}
		p.NextKey, p.NextUploadID = next, page.NextUploadIdMarker
	}
	return p, nil
}

// listedKey is a key as a listing gave it: URL-encoded when the store says
// it honoured encoding-type=url (S3's form encoding: '+' is a space), as it
// is otherwise (docs/COMPATIBILITY.md).
func listedKey(encodingType, key string) (string, error) {
	if encodingType != "url" {
		return key, nil
	}
	k, err := url.QueryUnescape(key)
	if err != nil {
		return "", fmt.Errorf("a key the store URL-encoded does not decode: %q: %w", key, err)
	}
	return k, nil
}

// ErrNoSuchUpload: the store does not know the upload (completed or aborted).
var ErrNoSuchUpload = fmt.Errorf("no such upload")

// LastPart is when the upload's newest part was uploaded (its last activity),
// and how many parts it has; the zero time when it has none. It reads every
// page of ListParts.
func (c *Client) LastPart(ctx context.Context, bucket, key, uploadID string) (time.Time, int, error) {
	var last time.Time
	n := 0
	marker := ""
	for {
		q := "max-parts=1000&uploadId=" + url.QueryEscape(uploadID)
		if marker != "" {
			q += "&part-number-marker=" + url.QueryEscape(marker)
		}
		var page struct {
			Part []struct {
				LastModified string
			}
			IsTruncated          bool
			NextPartNumberMarker string
		}
		if err := c.getXML(ctx, LevelObject, bucket, key, q, &page); err != nil {
			return time.Time{}, 0, err
		}
		for _, p := range page.Part {
			n++
			if at, err := time.Parse(time.RFC3339Nano, p.LastModified); err == nil && at.After(last) {
				last = at
			}
		}
		if !page.IsTruncated || page.NextPartNumberMarker == "" {
			return last, n, nil
		}
		marker = page.NextPartNumberMarker
	}
}

// Part is one part of a multipart upload as ListParts reports it.
type Part struct {
	ETag string // without quotes
	Size int64
}

// Parts lists an upload's parts by part number, reading every page of
// ListParts. A part number may have more than one: a store may list a part
// uploaded again beside the earlier one until the upload completes.
func (c *Client) Parts(ctx context.Context, bucket, key, uploadID string) (map[int][]Part, error) {
	parts := map[int][]Part{}
	marker := ""
	for {
		q := "max-parts=1000&uploadId=" + url.QueryEscape(uploadID)
		if marker != "" {
			q += "&part-number-marker=" + url.QueryEscape(marker)
		}
		var page struct {
			Part []struct {
				PartNumber int
				ETag       string
				Size       int64
			}
			IsTruncated          bool
			NextPartNumberMarker string
		}
		if err := c.getXML(ctx, LevelObject, bucket, key, q, &page); err != nil {
			return nil, err
		}
		for _, p := range page.Part {
			parts[p.PartNumber] = append(parts[p.PartNumber], Part{ETag: TrimETag(p.ETag), Size: p.Size})
		}
		if !page.IsTruncated || page.NextPartNumberMarker == "" || page.NextPartNumberMarker == marker {
			return parts, nil
		}
		marker = page.NextPartNumberMarker
	}
}

// AbortMultipartUpload aborts an upload. An upload the store no longer knows
// is ErrNoSuchUpload.
func (c *Client) AbortMultipartUpload(ctx context.Context, bucket, key, uploadID string) error {
	req, err := c.NewRequest(ctx, http.MethodDelete, LevelObject, bucket, key, "uploadId="+url.QueryEscape(uploadID))
	if err != nil {
		return err
	}
	resp, err := c.Send(req, sigv4.EmptySHA256)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	return statusErr(resp, body)
}

// getXML sends a GET and decodes its 200 answer into v.
func (c *Client) getXML(ctx context.Context, level Level, bucket, key, q string, v any) error {
	req, err := c.NewRequest(ctx, http.MethodGet, level, bucket, key, q)
	if err != nil {
		return err
	}
	resp, err := c.Send(req, sigv4.EmptySHA256)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return statusErr(resp, body)
	}
	return xml.Unmarshal(body, v)
}

func statusErr(resp *http.Response, body []byte) error {
	var e struct{ Code, Message string }
	_ = xml.Unmarshal(body, &e)
	if e.Code == "NoSuchUpload" {
		return ErrNoSuchUpload
	}
	return fmt.Errorf("%s: %s %s", resp.Status, e.Code, strings.TrimSpace(e.Message))
}
