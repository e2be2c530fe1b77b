// Package store is fencegate's S3 client toward the store behind the gateway:
// its configuration, signing with fencegate's own credentials, path-style
// request building, keep-alive connections whose bodies can be spliced
// (conn.go, splice.go), and the HEAD and listing that settling, the
// reconciler and `fencegate catalog import` use (head.go, list.go). Every call
// takes its deadline from the caller's context; the client sets none of its
// own. It knows nothing of the gateway or of leases.
package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/fencegate/fencegate/sigv4"
)

// Config is the S3 store behind the gateway and fencegate's own credentials
// for it.
type Config struct {
	Endpoint  string // e.g. http://127.0.0.1:8333
	AccessKey string
	SecretKey string
	Region    string // "" is us-east-1
	// InsecureTLS skips certificate checks toward the store (test stores).
	InsecureTLS bool
	// AnswerTimeout bounds the wait for the head of the store's answer once
	// a request has been sent whole, and how long the store may stop in the
	// middle of an exchange: take nothing more of a request that is being
	// sent, or send nothing more of an answer's body that is being read
	// (store/tcpwatch) (0: DefaultAnswerTimeout; negative: no bound).
	AnswerTimeout time.Duration
}

// AttemptHeader carries fencegate's attempt id on every object it writes, so
// the bytes at a key can be attributed (docs/DESIGN.md, W1). Clients never see
// it, and cannot set it.
const AttemptHeader = "x-amz-meta-fencegate-attempt"

// DefaultAnswerTimeout is how long the store may take to begin its answer to
// a request sent whole: far longer than any request of a healthy store takes
// (the slowest, a CopyObject of 5 GiB within the store, needs 45 MB/s), far
// shorter than for ever.
const DefaultAnswerTimeout = 2 * time.Minute

// ErrNoAnswer: the store took a request and did not begin its answer within
// the answer timeout, or stopped in the middle of the exchange for as long.
// A request sent whole may still be applied: to a write it is a lost answer.
var ErrNoAnswer = errors.New("the store did not answer")

// requestStalledFor and answerStalledFor are ErrNoAnswer for an exchange the
// store stopped in the middle of for d: it took nothing more of the
// request, or sent nothing more of its answer.
func requestStalledFor(d time.Duration) error {
	return fmt.Errorf("%w: it took nothing more of the request for %v", ErrNoAnswer, d)
}

func answerStalledFor(d time.Duration) error {
	return fmt.Errorf("%w: it sent nothing more of its answer for %v", ErrNoAnswer, d)
}

// tlsHandshakeTimeout bounds the TLS handshake with the store: 10 s, as
// net/http's default transport, or the answer timeout if that is shorter.
func tlsHandshakeTimeout(answer time.Duration) time.Duration {
	if answer > 0 && answer < 10*time.Second {
		return answer
	}
	return 10 * time.Second
}

// noAnswerWithin is ErrNoAnswer for a request given up after d.
func noAnswerWithin(d time.Duration) error {
	return fmt.Errorf("%w: no answer within %v", ErrNoAnswer, d)
}

// HeadTimeout bounds a HEAD a caller makes outside the write protocol's own
// bounds: a copy's source, a completed upload's size. It is a store call's
// bound, not a database call's.
const HeadTimeout = 30 * time.Second

// Level is where in the S3 namespace a request addresses.
type Level uint8

const (
	LevelService Level = iota
	LevelBucket
	LevelObject
)

// Client sends requests to the store, signed with fencegate's own
// credentials. It never retries: a write whose outcome is unknown must not be
// sent twice (docs/DESIGN.md, W4). http.Transport replays only bodiless
// GET/HEAD/OPTIONS on a dead idle connection, and the client's own
// connections (conn.go) only GET and HEAD, which are safe.
type Client struct {
	base *url.URL
	// root is what NewRequest's requests have of base, as http.NewRequest
	// makes it from the base's root: parsed once here, not per request.
	root      *http.Request
	signer    *sigv4.Signer
	transport *http.Transport
	conns     *connPool // GET, HEAD and small bodies to a plain-HTTP store (conn.go)
}

// New makes a client for the store cfg names. It does not contact the store.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.Endpoint, "/"))
	if err != nil {
		return nil, err
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	answer := cfg.AnswerTimeout
	if answer == 0 {
		answer = DefaultAnswerTimeout
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         dialCopyConns((&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext, answer),
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		// A store that takes a request and never answers (a hung process, a
		// network dropping its packets) must not hold the request, its lease
		// and its client for ever.
		ResponseHeaderTimeout: max(answer, 0),
		// Nor one that takes the connection and never finishes TLS's
		// handshake: a transport built by hand has no bound on it.
		TLSHandshakeTimeout: tlsHandshakeTimeout(answer),
		// The gateway relays bodies byte for byte: no transparent gzip.
		DisableCompression: true,
		WriteBufferSize:    256 << 10,
		ReadBufferSize:     256 << 10,
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: cfg.InsecureTLS}, //nolint:gosec // opt-in, for test stores
	}
	root, err := http.NewRequest(http.MethodGet, u.Scheme+"://"+u.Host+"/", nil)
	if err != nil {
		return nil, err
	}
	c := &Client{
		base:      u,
		root:      root,
		signer:    &sigv4.Signer{AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, Region: region, Service: "s3"},
		transport: tr,
	}
	if u.Scheme == "http" {
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
		c.conns = newConnPool(host, answer)
	}
	return c, nil
}

// errObjectWithoutKey: an object operation must never become a bucket-level
// request (an empty key would turn DeleteObject into DeleteBucket, made with
// fencegate's own credentials).
var errObjectWithoutKey = errors.New("an object operation without a key")

// NewRequest builds a path-style request at level for bucket/key with the raw
// query rawQuery, bound to ctx. An object-level request always names its key.
func (c *Client) NewRequest(ctx context.Context, method string, level Level, bucket, key, rawQuery string) (*http.Request, error) {
	if level == LevelObject && (bucket == "" || key == "") {
		return nil, errObjectWithoutKey
	}
	var buf [256]byte // most paths are built here, on the stack; string(path) is their one copy
	path := append(buf[:0], c.base.Path...)
	if bucket != "" {
		path = append(path, '/')
		path = append(path, bucket...)
		if key != "" {
			path = append(path, '/')
			path = sigv4.AppendEscapedPath(path, key)
		}
	} else {
		path = append(path, '/')
	}
	// An empty URL parses to nothing: the scheme and host are the root's.
	req, err := http.NewRequestWithContext(ctx, method, "", nil)
	if err != nil {
		return nil, err
	}
	req.URL.Scheme, req.URL.Host, req.URL.Path, req.Host = c.root.URL.Scheme, c.root.URL.Host, c.root.URL.Path, c.root.Host
	// Opaque carries the path exactly as escaped here, both on the request line
	// and in the signature.
	req.URL.Opaque = string(path)
	req.URL.RawQuery = rawQuery
	return req, nil
}

// Send signs req with payloadHash (sigv4.EmptySHA256 for no body) and sends it
// once (a bodiless read may be repeated on a fresh connection, see
// connPool.roundTrip). req's context bounds the exchange and the answer's body.
func (c *Client) Send(req *http.Request, payloadHash string) (*http.Response, error) {
	if err := c.Sign(req, payloadHash); err != nil {
		return nil, err
	}
	return c.send(req)
}

// send sends a signed or anonymous request on the client's own connections
// or through the transport; either way a store that does not begin its
// answer in time is ErrNoAnswer.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	if c.conns != nil && carries(req) {
		return c.conns.roundTrip(req)
	}
	resp, err := c.transport.RoundTrip(req)
	// The transport's ResponseHeaderTimeout error is a net.Error that says
	// only this in its text.
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() && strings.Contains(err.Error(), "awaiting response headers") {
		return nil, noAnswerWithin(c.transport.ResponseHeaderTimeout)
	}
	// The transport sets no deadline of its own: this one is a copyConn's
	// watch cutting a body the store stopped taking.
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && req.Context().Err() == nil {
		return nil, requestStalledFor(c.transport.ResponseHeaderTimeout)
	}
	return resp, err
}

// Sign signs req for the store with fencegate's own credentials and
// payloadHash as its x-amz-content-sha256; Send does it before sending.
// Every header of req is signed (but the hop's own: sigv4.Signer), and its
// query is rewritten in canonical form, so the store reads the query that
// was signed.
func (c *Client) Sign(req *http.Request, payloadHash string) error {
	amzDate := sigv4.AmzDate(time.Now())
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	req.Header.Set("X-Amz-Date", amzDate)
	r := sigv4.Request{Method: req.Method, Host: req.Host, RawPath: req.URL.Opaque, RawQuery: req.URL.RawQuery}
	if r.Host == "" {
		r.Host = req.URL.Host
	}
	if r.RawPath == "" {
		r.RawPath = req.URL.EscapedPath()
	}
	var fields [16]sigv4.HeaderField // most store requests carry fewer: no allocation
	r.Headers = fields[:0]
	for name, values := range req.Header {
		for _, v := range values {
			r.Headers = append(r.Headers, sigv4.HeaderField{Name: name, Value: v})
		}
	}
	signed := c.signer.Sign(&r, amzDate, payloadHash)
	req.URL.RawQuery = signed.Query
	req.Header.Set("Authorization", signed.Authorization)
	return nil
}

// SetHeaderWhitespace signs from now on with header values folded as the
// store verifies them (sigv4.Whitespace; the gateway's start-up probe learns
// it): a value with a tab is otherwise signed in a form the store refuses.
func (c *Client) SetHeaderWhitespace(w sigv4.Whitespace) { c.signer.SetWhitespace(w) }

// HeaderWhitespace is the folding the client signs header values with.
func (c *Client) HeaderWhitespace() sigv4.Whitespace { return c.signer.Whitespace() }

// SendUnsigned sends req without any credentials, as an anonymous client
// would: the store answers it from its own ACLs and policies (an anonymous
// read, gateway/anonymous.go).
func (c *Client) SendUnsigned(req *http.Request) (*http.Response, error) {
	req.Header.Del("Authorization")
	req.Header.Del("X-Amz-Content-Sha256")
	req.Header.Del("X-Amz-Date")
	req.Header.Del("X-Amz-Security-Token")
	return c.send(req)
}

// Ping asks the store for its bucket list with fencegate's credentials: it
// answers, and it accepts them.
func (c *Client) Ping(ctx context.Context) error {
	req, err := c.NewRequest(ctx, http.MethodGet, LevelService, "", "", "")
	if err != nil {
		return err
	}
	resp, err := c.Send(req, sigv4.EmptySHA256)
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
