package store

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate/sigv4"
)

// ListKeys calls fn with every key of bucket, in pages (ListObjectsV2).
func (c *Client) ListKeys(ctx context.Context, bucket string, fn func(keys []string) error) error {
	token := ""
	for {
		q := "list-type=2&max-keys=1000"
		if token != "" {
			q += "&continuation-token=" + url.QueryEscape(token)
		}
		req, err := c.NewRequest(ctx, http.MethodGet, LevelBucket, bucket, "", q)
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
			var e struct{ Message string }
			_ = xml.Unmarshal(body, &e)
			return fmt.Errorf("list %s: %s: %s", bucket, resp.Status, strings.TrimSpace(e.Message))
		}
		var page struct {
			Contents []struct {
				Key string
			}
			IsTruncated           bool
			NextContinuationToken string
		}
		if err := xml.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("list %s: %w", bucket, err)
		}
		keys := make([]string, len(page.Contents))
		for i, c := range page.Contents {
			keys[i] = c.Key
		}
		if err := fn(keys); err != nil {
			return err
		}
		if !page.IsTruncated {
			return nil
		}
		token = page.NextContinuationToken
	}
}
