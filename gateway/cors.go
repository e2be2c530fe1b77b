package gateway

import (
	"context"
	"encoding/xml"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// CORS as S3 answers it (docs/DESIGN.md, "CORS").
//
// A browser's preflight (OPTIONS with Origin and Access-Control-Request-Method)
// carries no signature: it is answered here from the bucket's CORS
// configuration, never forwarded. The actual request that follows (a
// presigned GET or PUT, a POST form) is authenticated as any other, and its
// answer, error or not, carries the Access-Control-* headers of the first
// rule matching its Origin and method.
//
// The configuration is the store's: PutBucketCors and GetBucketCors pass
// through to it, and fencegate reads it with its own credentials, keeping each
// bucket's for corsCacheTTL. A PutBucketCors or DeleteBucketCors through this
// gateway drops its copy at once; through another gateway or straight at the
// store, the change is seen within the TTL. Where a bucket has none (or the
// store keeps none), the gateway-wide rule of --cors-allow-origins applies.

// corsRule is one CORSRule of a bucket's configuration.
type corsRule struct {
	Origins  []string `xml:"AllowedOrigin"`
	Methods  []string `xml:"AllowedMethod"`
	Headers  []string `xml:"AllowedHeader"`
	Expose   []string `xml:"ExposeHeader"`
	MaxAge   *int     `xml:"MaxAgeSeconds"`
	methods  string   // Methods joined, as Access-Control-Allow-Methods says them
	exposing string
}

type corsConfig struct {
	Rules []corsRule `xml:"CORSRule"`
}

func parseCORS(doc []byte) (*corsConfig, error) {
	var c corsConfig
	if err := xml.Unmarshal(doc, &c); err != nil {
		return nil, err
	}
	c.prepare()
	return &c, nil
}

func (c *corsConfig) prepare() {
	for i := range c.Rules {
		r := &c.Rules[i]
		r.methods = strings.Join(r.Methods, ", ")
		r.exposing = strings.Join(r.Expose, ", ")
	}
}

// defaultCORS is the gateway-wide rule of --cors-allow-origins: the listed
// origins may use every method S3's CORS knows, with any header, and read
// the headers S3 clients look at.
func defaultCORS(origins []string) *corsConfig {
	var keep []string
	for _, o := range origins {
		if o = strings.TrimSpace(o); o != "" {
			keep = append(keep, o)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	maxAge := 600
	c := &corsConfig{Rules: []corsRule{{
		Origins: keep,
		Methods: []string{"GET", "PUT", "POST", "DELETE", "HEAD"},
		Headers: []string{"*"},
		Expose:  []string{"ETag", "x-amz-request-id", "x-amz-version-id", "x-amz-delete-marker", "x-fencegate-generation"},
		MaxAge:  &maxAge,
	}}}
	c.prepare()
	return c
}

// match is the first rule allowing origin, method and every one of headers
// (lower-cased names), as S3 picks it.
func (c *corsConfig) match(origin, method string, headers []string) *corsRule {
	if c == nil {
		return nil
	}
	for i := range c.Rules {
		r := &c.Rules[i]
		if !anyWildcard(r.Origins, origin, false) || !contains(r.Methods, method) {
			continue
		}
		ok := true
		for _, h := range headers {
			if !anyWildcard(r.Headers, h, true) {
				ok = false
				break
			}
		}
		if ok {
			return r
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// anyWildcard: s matches one of the patterns, each with at most one '*'
// standing for any run of characters (as S3 allows in AllowedOrigin and
// AllowedHeader); header names compare without case.
func anyWildcard(patterns []string, s string, fold bool) bool {
	if fold {
		s = strings.ToLower(s)
	}
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if fold {
			p = strings.ToLower(p)
		}
		pre, post, star := strings.Cut(p, "*")
		if !star {
			if p == s {
				return true
			}
			continue
		}
		if len(s) >= len(pre)+len(post) && strings.HasPrefix(s, pre) && strings.HasSuffix(s, post) {
			return true
		}
	}
	return false
}

// allowOrigin is Access-Control-Allow-Origin for a request from origin: a
// rule open to every origin says "*", as S3 does, and then allows no
// credentials.
func (r *corsRule) allowOrigin(origin string) (string, bool) {
	for _, o := range r.Origins {
		if strings.TrimSpace(o) == "*" {
			return "*", false
		}
	}
	return origin, true
}

// setHeaders writes the rule's answer to a request from origin; requested
// are the preflight's Access-Control-Request-Headers, echoed as allowed.
func (r *corsRule) setHeaders(h *fasthttp.ResponseHeader, origin string, requested []string) {
	allow, credentials := r.allowOrigin(origin)
	h.Set("Access-Control-Allow-Origin", allow)
	h.Set("Access-Control-Allow-Methods", r.methods)
	if credentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	if len(requested) > 0 {
		h.Set("Access-Control-Allow-Headers", strings.Join(requested, ", "))
	}
	if r.exposing != "" {
		h.Set("Access-Control-Expose-Headers", r.exposing)
	}
	if r.MaxAge != nil {
		h.Set("Access-Control-Max-Age", strconv.Itoa(*r.MaxAge))
	}
}

// varyCORS: a cache must keep answers to different origins and preflights apart.
const varyCORS = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"

var (
	errCORSNoOrigin = newAPIError("BadRequest", 400, "Insufficient information. Origin request header needed.")
	errCORSDisabled = newAPIError("CORSResponse", 403, "CORS is not enabled for this bucket.")
	errCORSNoRule   = newAPIError("CORSResponse", 403,
		"This CORS request is not allowed. This is usually because the evalution of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.")
)

// corsMethods are the methods a CORS rule may name.
var corsMethods = map[string]bool{"GET": true, "PUT": true, "POST": true, "DELETE": true, "HEAD": true}

// preflight answers an OPTIONS request: no signature, nothing forwarded.
func (s *Server) preflight(ctx *fasthttp.RequestCtx) {
	r := &request{id: newRequestID(), start: time.Now(), op: Op{Name: "PreflightCORS"}}
	e := s.answerPreflight(ctx, r)
	if e != nil {
		writeError(ctx, r.id, e)
	} else {
		ctx.Response.Header.Set("x-amz-request-id", r.id)
	}
	ctx.Response.Header.Set("Vary", varyCORS)
	s.finish(ctx, r, e)
}

func (s *Server) answerPreflight(ctx *fasthttp.RequestCtx, r *request) *apiError {
	h := &ctx.Request.Header
	host, fwd := s.clientView(ctx)
	r.client = fwd.client
	bucket, key, ok := route(string(host), string(ctx.Request.URI().PathOriginal()), s.cfg.Domains)
	if !ok {
		return errInvalidURI
	}
	r.bucket, r.key = bucket, key
	if bucket != "" && !ValidBucketName(bucket) {
		return errInvalidBucketName
	}
	origin := headerFold(h, "Origin")
	if origin == "" {
		return errCORSNoOrigin
	}
	method := headerFold(h, "Access-Control-Request-Method")
	if !corsMethods[method] {
		return newAPIError("BadRequest", 400, "Invalid Access-Control-Request-Method: "+method)
	}
	requested := requestedHeaders(headerFold(h, "Access-Control-Request-Headers"))
	cfg, err := s.cors.get(ctx, bucket)
	if err != nil {
		s.deps.Log.Warn("reading a bucket's CORS configuration from the store", "request_id", r.id, "bucket", bucket, "err", err)
		return errStoreUnreached
	}
	if cfg == nil {
		return errCORSDisabled
	}
	rule := cfg.match(origin, method, requested)
	if rule == nil {
		return errCORSNoRule
	}
	rule.setHeaders(&ctx.Response.Header, origin, requested)
	return nil
}

// requestedHeaders splits Access-Control-Request-Headers into lower-case names.
func requestedHeaders(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.ToLower(strings.TrimSpace(f)); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// corsActual adds the CORS headers to the answer of a request that carries
// an Origin header, whatever the answer is (errors and redirects included):
// a browser shows a page nothing of an answer without them, not even why it
// failed. It runs after the answer's head is made and before it is sent.
func (s *Server) corsActual(ctx *fasthttp.RequestCtx, r *request) {
	origin := headerFold(&ctx.Request.Header, "Origin")
	if origin == "" {
		return
	}
	h := &ctx.Response.Header
	h.Set("Vary", varyCORS)
	bucket := ""
	if r != nil && ValidBucketName(r.bucket) {
		bucket = r.bucket
	}
	cfg, err := s.cors.get(ctx, bucket)
	if err != nil {
		s.deps.Log.Warn("reading a bucket's CORS configuration from the store", "bucket", bucket, "err", err)
		return
	}
	if rule := cfg.match(origin, methodName(ctx.Method()), nil); rule != nil {
		rule.setHeaders(h, origin, nil)
	}
}

// corsCacheTTL is how long a bucket's CORS configuration read from the store
// is used before it is read again (Config.CORSCacheTTL's default).
const corsCacheTTL = 10 * time.Second

// corsCacheMax bounds the buckets whose configuration is kept: preflights
// are unauthenticated, and each name they make up must not cost memory.
const corsCacheMax = 4096

// corsCache holds each bucket's CORS configuration as read from the store,
// for a bounded time; one read per bucket is in flight at a time.
type corsCache struct {
	ttl      time.Duration
	fallback *corsConfig // --cors-allow-origins, for buckets without their own
	fetch    func(ctx context.Context, bucket string) (doc []byte, found bool, err error)
	now      func() time.Time

	mu      sync.Mutex
	entries map[string]*corsEntry
}

type corsEntry struct {
	ready   chan struct{} // closed once cfg and err are set
	cfg     *corsConfig   // nil: the bucket has no configuration
	err     error
	expires time.Time
}

// get is the configuration that decides for bucket: its own, else the
// gateway-wide rule; nil when neither exists.
func (c *corsCache) get(ctx context.Context, bucket string) (*corsConfig, error) {
	if bucket == "" {
		return c.fallback, nil
	}
	now := c.now()
	c.mu.Lock()
	e := c.entries[bucket]
	if e != nil {
		select {
		case <-e.ready:
			if !now.Before(e.expires) {
				e = nil
			}
		default: // being read: wait for it below
		}
	}
	if e == nil {
		e = &corsEntry{ready: make(chan struct{})}
		c.evictLocked(now)
		c.entries[bucket] = e
		c.mu.Unlock()
		c.load(bucket, e)
	} else {
		c.mu.Unlock()
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if e.err != nil {
		return nil, e.err
	}
	if e.cfg == nil {
		return c.fallback, nil
	}
	return e.cfg, nil
}

func (c *corsCache) load(bucket string, e *corsEntry) {
	defer close(e.ready)
	ctx, cancel := context.WithTimeout(context.Background(), corsFetchTimeout)
	defer cancel()
	doc, found, err := c.fetch(ctx, bucket)
	e.expires = c.now().Add(c.ttl)
	switch {
	case err != nil:
		e.err = err
		e.expires = c.now() // not kept: the next request asks again
	case found:
		if e.cfg, e.err = parseCORS(doc); e.err != nil {
			e.expires = c.now()
		}
	}
}

// corsFetchTimeout bounds one read of a configuration from the store.
const corsFetchTimeout = 5 * time.Second

// evictLocked makes room for one more entry: expired ones go first, then
// any (a bucket dropped early is only read again).
func (c *corsCache) evictLocked(now time.Time) {
	if len(c.entries) < corsCacheMax {
		return
	}
	for b, e := range c.entries {
		select {
		case <-e.ready:
			if !now.Before(e.expires) {
				delete(c.entries, b)
			}
		default:
		}
	}
	for b := range c.entries {
		if len(c.entries) < corsCacheMax {
			break
		}
		delete(c.entries, b)
	}
}

// forget drops bucket's configuration: it was just changed through this gateway.
func (c *corsCache) forget(bucket string) {
	c.mu.Lock()
	delete(c.entries, bucket)
	c.mu.Unlock()
}

// changeCORS forwards PutBucketCors or DeleteBucketCors and drops the
// bucket's cached configuration, so this gateway's next preflight reads the
// new one.
func (s *Server) changeCORS(ctx *fasthttp.RequestCtx, r *request) *apiError {
	e := s.forward(ctx, r)
	s.cors.forget(r.bucket)
	return e
}
