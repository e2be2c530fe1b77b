package gateway

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/fencegate/fencegate/lease"
)

// StoreClient is the store as fencegate's own tools see it (catalog import):
// HEAD and listing with the backend credentials.
type StoreClient struct{ v storeView }

func NewStoreClient(b Backend) (*StoreClient, error) {
	be, err := newBackend(b)
	if err != nil {
		return nil, err
	}
	return &StoreClient{v: storeView{b: be}}, nil
}

func (c *StoreClient) Head(ctx context.Context, bucket, key string) (lease.Object, error) {
	return c.v.Head(ctx, bucket, key)
}

// ListKeys calls fn with every key of bucket, in pages (ListObjectsV2).
func (c *StoreClient) ListKeys(ctx context.Context, bucket string, fn func(keys []string) error) error {
	token := ""
	for {
		q := "list-type=2&max-keys=1000"
		if token != "" {
			q += "&continuation-token=" + url.QueryEscape(token)
		}
		req, err := c.v.b.newRequest(ctx, http.MethodGet, LevelBucket, bucket, "", q)
		if err != nil {
			return err
		}
		resp, err := c.v.b.send(req, emptySHA256)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("list %s: %s: %s", bucket, resp.Status, xmlElement(body, "Message"))
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
