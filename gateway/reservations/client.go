package reservations

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/fencegate/fencegate/sigv4"
)

// Client calls the reservation API, signing with SigV4 (service s3) with a
// fencegate access key that holds reserve:BUCKET.
type Client struct {
	Endpoint             string // scheme://host[:port]
	AccessKey, SecretKey string
	Region               string       // default us-east-1
	HTTP                 *http.Client // default http.DefaultClient
}

// Create makes a reservation; its PutURL is for the uploading client.
func (c *Client) Create(ctx context.Context, q CreateRequest) (Reservation, error) {
	var r Reservation
	b, err := json.Marshal(q)
	if err != nil {
		return r, err
	}
	return r, c.do(ctx, http.MethodPost, APIPath, "", b, &r)
}

// Get reads one reservation (its state; size and ETag once committed).
func (c *Client) Get(ctx context.Context, id string) (Reservation, error) {
	var r Reservation
	return r, c.do(ctx, http.MethodGet, APIPath+"/"+url.PathEscape(id), "", nil, &r)
}

// List lists a bucket's reservations, newest first.
func (c *Client) List(ctx context.Context, bucket string) ([]Reservation, error) {
	var out []Reservation
	return out, c.do(ctx, http.MethodGet, APIPath, "bucket="+url.QueryEscape(bucket), nil, &out)
}

// Cancel ends a live reservation; ErrNotLive when it was not.
func (c *Client) Cancel(ctx context.Context, id string) (Reservation, error) {
	var r Reservation
	return r, c.do(ctx, http.MethodDelete, APIPath+"/"+url.PathEscape(id), "", nil, &r)
}

// Complete commits a reservation on the bytes the store holds at its key
// (checked by HEAD: size, SHA-256), for clients that upload elsewhere or to
// confirm. Idempotent: a committed reservation is returned as it is;
// ErrNotUploaded when the key holds no such bytes, ErrNotLive when the
// reservation ended.
func (c *Client) Complete(ctx context.Context, id string) (Reservation, error) {
	var r Reservation
	return r, c.do(ctx, http.MethodPost, APIPath+"/"+url.PathEscape(id)+"/complete", "", nil, &r)
}

func (c *Client) do(ctx context.Context, method, path, query string, body []byte, out any) error {
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return err
	}
	region := c.Region
	if region == "" {
		region = "us-east-1"
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	date := sigv4.AmzDate(time.Now())
	s := sigv4.Signer{AccessKey: c.AccessKey, SecretKey: c.SecretKey, Region: region, Service: "s3"}
	hdrs := []sigv4.HeaderField{{Name: "X-Amz-Date", Value: date}, {Name: "X-Amz-Content-Sha256", Value: hash}}
	if body != nil {
		hdrs = append(hdrs, sigv4.HeaderField{Name: "Content-Type", Value: "application/json"})
	}
	signed := s.Sign(&sigv4.Request{Method: method, Host: u.Host, RawPath: path, RawQuery: query, Headers: hdrs}, date, hash)
	target := c.Endpoint + path
	if signed.Query != "" {
		target += "?" + signed.Query
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for _, h := range hdrs {
		req.Header.Set(h.Name, h.Value)
	}
	req.Header.Set("Authorization", signed.Authorization)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		e := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(b, e) != nil || e.Code == "" {
			e.Code, e.Message = http.StatusText(resp.StatusCode), string(b)
		}
		return e
	}
	return json.Unmarshal(b, out)
}
