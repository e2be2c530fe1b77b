package store

import (
	"context"
	"fmt"
	"net/url"
)

// ListKeys calls fn with every key of bucket, in pages (ListObjectsV2).
func (c *Client) ListKeys(ctx context.Context, bucket string, fn func(keys []string) error) error {
	token := ""
	for {
		q := "list-type=2&max-keys=1000"
		if token != "" {
			q += "&continuation-token=" + url.QueryEscape(token)
		}
		var page struct {
			Contents []struct {
				Key string
			}
			IsTruncated           bool
			NextContinuationToken string
		}
		if err := c.getXML(ctx, LevelBucket, bucket, "", q, &page); err != nil {
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
