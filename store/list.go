package store

import "context"

// ListKeys calls fn with every key of bucket, in pages (ListPage's, of 1000).
func (c *Client) ListKeys(ctx context.Context, bucket string, fn func(keys []string) error) error {
	after := ""
	for {
		p, err := c.ListPage(ctx, bucket, "", after, 1000)
		if err != nil {
			return err
		}
		keys := make([]string, len(p.Objects))
		for i, o := range p.Objects {
			keys[i] = o.Key
		}
		if err := fn(keys); err != nil {
			return err
		}
		if p.Next == "" {
			return nil
		}
		after = p.Next
	}
}
