package store

import (
	"context"
	"encoding/xml"
	"io"
	"net/http"

	"github.com/fencegate/fencegate/sigv4"
)

// maxCORSDocument bounds a bucket's CORS configuration as read from the
// store: S3 allows 100 rules, far below this.
const maxCORSDocument = 256 << 10

// BucketCORS reads a bucket's CORS configuration (GetBucketCors) with
// fencegate's own credentials. found is false when the bucket has none, or
// when the store answers that it does not keep CORS configurations or the
// bucket does not exist (the browser's answer is the same: no rule); any
// other answer is an error.
func (c *Client) BucketCORS(ctx context.Context, bucket string) (doc []byte, found bool, err error) {
	req, err := c.NewRequest(ctx, http.MethodGet, LevelBucket, bucket, "", "cors=")
	if err != nil {
		return nil, false, err
	}
	resp, err := c.Send(req, sigv4.EmptySHA256)
	if err != nil {
		return nil, false, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCORSDocument))
	resp.Body.Close()
	if err != nil {
		return nil, false, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return body, true, nil
	case http.StatusNotFound, http.StatusNotImplemented:
		return nil, false, nil
	}
	var e struct{ Code string }
	_ = xml.Unmarshal(body, &e)
	return nil, false, &StatusError{Status: resp.StatusCode, What: "GetBucketCors " + e.Code}
}
