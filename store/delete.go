package store

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/fencegate/fencegate/sigv4"
)

// ErrPreconditionFailed: the store refused a conditional request (412).
var ErrPreconditionFailed = errors.New("the store refused the condition")

// DeleteIfMatch deletes key only while its ETag is etag (If-Match), for the
// reservation sweeper's fenced delete. A 412 is ErrPreconditionFailed; a
// 404 means the key is already gone (nil).
func (c *Client) DeleteIfMatch(ctx context.Context, bucket, key, etag string) error {
	req, err := c.NewRequest(ctx, http.MethodDelete, LevelObject, bucket, key, "")
	if err != nil {
		return err
	}
	req.Header.Set("If-Match", `"`+etag+`"`)
	resp, err := c.Send(req, sigv4.EmptySHA256)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2, resp.StatusCode == http.StatusNotFound:
		return nil
	case resp.StatusCode == http.StatusPreconditionFailed:
		return ErrPreconditionFailed
	}
	return statusErr(resp, body)
}
