package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Backend is the S3 store behind the gateway and fencegate's own credentials
// for it.
type Backend struct {
	Endpoint  string // e.g. http://127.0.0.1:8333
	AccessKey string
	SecretKey string
	Region    string
	// InsecureTLS skips certificate checks toward the store (test stores).
	InsecureTLS bool
}

// backend sends re-signed requests to the store. It never retries: a write
// whose outcome is unknown must not be sent twice (docs/DESIGN.md, W4), and
// http.Transport replays only bodiless GET/HEAD/OPTIONS on a dead idle
// connection, which are safe.
type backend struct {
	base      *url.URL
	creds     aws.Credentials
	region    string
	signer    *v4.Signer
	transport *http.Transport
	conns     *storeConns // GET and HEAD to a plain-HTTP store (storeconn.go)
}

func newBackend(b Backend) (*backend, error) {
	u, err := url.Parse(strings.TrimRight(b.Endpoint, "/"))
	if err != nil {
		return nil, err
	}
	region := b.Region
	if region == "" {
		region = "us-east-1"
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		// The gateway relays bodies byte for byte: no transparent gzip.
		DisableCompression: true,
		WriteBufferSize:    256 << 10,
		ReadBufferSize:     256 << 10,
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: b.InsecureTLS}, //nolint:gosec // opt-in, for test stores
	}
	be := &backend{
		base:   u,
		creds:  aws.Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey},
		region: region,
		signer: v4.NewSigner(func(o *v4.SignerOptions) {
			// S3 signs the path as sent, without escaping it a second time.
			o.DisableURIPathEscaping = true
		}),
		transport: tr,
	}
	if u.Scheme == "http" {
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
		be.conns = newStoreConns(host)
	}
	return be, nil
}

// errObjectWithoutKey: an object operation must never become a bucket-level
// request (an empty key would turn DeleteObject into DeleteBucket, made with
// fencegate's own credentials).
var errObjectWithoutKey = errors.New("an object operation without a key")

// newRequest builds a path-style request at level for bucket/key with the raw
// query q. An object-level request always names its key.
func (b *backend) newRequest(ctx context.Context, method string, level Level, bucket, key, rawQuery string) (*http.Request, error) {
	if level == LevelObject && (bucket == "" || key == "") {
		return nil, errObjectWithoutKey
	}
	path := make([]byte, 0, len(b.base.Path)+len(bucket)+len(key)+8)
	path = append(path, b.base.Path...)
	if bucket != "" {
		path = append(path, '/')
		path = append(path, bucket...)
		if key != "" {
			path = append(path, '/')
			path = escapeKeyPath(path, key)
		}
	} else {
		path = append(path, '/')
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base.Scheme+"://"+b.base.Host+"/", nil)
	if err != nil {
		return nil, err
	}
	// Opaque carries the path exactly as escaped here, both on the request line
	// and in the signature.
	req.URL.Opaque = string(path)
	req.URL.RawQuery = rawQuery
	return req, nil
}

// ping asks the store for its bucket list with the backend credentials: it
// answers, and it accepts them.
func (b *backend) ping(ctx context.Context) error {
	req, err := b.newRequest(ctx, http.MethodGet, LevelService, "", "", "")
	if err != nil {
		return err
	}
	resp, err := b.send(req, emptySHA256)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the store answered %s", resp.Status)
	}
	return nil
}

// send signs req with payloadHash and sends it once (a bodiless read may be
// repeated on a fresh connection, see storeConns.roundTrip).
func (b *backend) send(req *http.Request, payloadHash string) (*http.Response, error) {
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	if err := b.signer.SignHTTP(req.Context(), b.creds, req, payloadHash, "s3", b.region, time.Now()); err != nil {
		return nil, err
	}
	if b.conns != nil && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
		return b.conns.roundTrip(req)
	}
	return b.transport.RoundTrip(req)
}

// sendUnsigned sends req without any credentials, as an anonymous client
// would (anonymous.go): the store answers it from its own ACLs and policies.
func (b *backend) sendUnsigned(req *http.Request) (*http.Response, error) {
	req.Header.Del("Authorization")
	req.Header.Del("X-Amz-Content-Sha256")
	req.Header.Del("X-Amz-Date")
	req.Header.Del("X-Amz-Security-Token")
	if b.conns != nil && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
		return b.conns.roundTrip(req)
	}
	return b.transport.RoundTrip(req)
}
