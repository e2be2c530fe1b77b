// Package gateway is fencegate's S3 front: the fasthttp server clients talk to,
// and the admin listener (health, readiness, metrics). It knows nothing of SQL:
// what it needs from the database reaches it through the interfaces in Deps.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

// Config is the gateway's own configuration.
type Config struct {
	Listen      string // S3 API address, e.g. 127.0.0.1:9000
	AdminListen string // health, readiness and metrics; empty disables
	TLSCert     string // serve the S3 API over TLS when both are set
	TLSKey      string
	// ShutdownGrace is how long in-flight requests may run after a shutdown
	// starts before their connections are cut.
	ShutdownGrace time.Duration
	// Domains enable virtual-host addressing: bucket.<domain>.
	Domains []string
	// Region clients must sign for ("" accepts any).
	Region string
	// BodyStallTimeout ends a request body that sends nothing for this long
	// with S3's RequestTimeout.
	BodyStallTimeout time.Duration
	// SendStallTimeout closes a client connection that acknowledges no byte
	// of an answer being written to it for this long (sendstall.go).
	// Negative: no bound.
	SendStallTimeout time.Duration
	// KeyPollInterval is how often the access-key version is checked.
	KeyPollInterval time.Duration
	// Store is the S3 store behind the gateway, and fencegate's credentials there.
	Store store.Config

	// Limits (limits.go); zero values take the defaults.

	// HeaderTimeout bounds the wait for a request's headers: from the
	// connection's accept for its first request, from its first byte for a
	// keep-alive one. It also bounds a TLS handshake.
	HeaderTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its next request.
	IdleTimeout time.Duration
	// MaxConns and MaxConnsPerIP bound open S3 client connections, in total and
	// per client IP (negative: no bound). A connection over either is answered
	// 503 SlowDown and closed.
	MaxConns      int
	MaxConnsPerIP int
	// BodyMemory bounds the bytes of small request bodies (XML documents, read
	// whole) held at once; a request waits up to BodyMemoryWait for its share,
	// then gets 503 SlowDown.
	BodyMemory     int64
	BodyMemoryWait time.Duration
	// AdminToken, when set, is the bearer token /readyz and /metrics require.
	AdminToken string

	// The PutObject body spool (spool.go): bodies up to SpoolMax (negative:
	// none) are received whole before the lease, in memory up to SpoolMemory,
	// else in an unlinked file in SpoolDir ("" is the system's temporary
	// directory), with at most SpoolBudget bytes held at once.
	SpoolMax    int64
	SpoolMemory int64
	SpoolBudget int64
	SpoolDir    string

	// AnonymousWriteBuckets are the buckets where requests without
	// credentials may write (PutObject, DeleteObject, DeleteObjects,
	// multipart uploads), through the write protocol with fencegate's own
	// credentials at the store. Elsewhere an anonymous write is AccessDenied;
	// anonymous reads are forwarded unsigned everywhere (admit.go).
	AnonymousWriteBuckets []string

	// CORSAllowOrigins is the gateway-wide CORS rule (cors.go) for buckets
	// without a CORS configuration of their own: these origins may use every
	// method with any header. Empty: none.
	CORSAllowOrigins []string
	// CORSCacheTTL is how long a bucket's CORS configuration read from the
	// store is used (default 10 s).
	CORSCacheTTL time.Duration
	// DisableSigV2 refuses AWS Signature Version 2 requests (header and
	// presigned URL) with NotImplemented; V4 only.
	DisableSigV2 bool
	// TrustedProxies are the addresses and CIDRs (proxies.go) whose
	// Forwarded and X-Forwarded-* headers give the client's Host, scheme
	// and address; from anywhere else those headers are ignored.
	TrustedProxies []string
}

func (c *Config) applyDefaults() {
	if c.SpoolMax == 0 {
		c.SpoolMax = defaultSpoolMax
	}
	if c.SpoolMemory == 0 {
		c.SpoolMemory = defaultSpoolMemory
	}
	if c.SpoolBudget == 0 {
		c.SpoolBudget = defaultSpoolBudget
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.BodyStallTimeout == 0 {
		c.BodyStallTimeout = 20 * time.Second
	}
	if c.SendStallTimeout == 0 {
		c.SendStallTimeout = defaultSendStallTimeout
	}
	if c.CORSCacheTTL <= 0 {
		c.CORSCacheTTL = corsCacheTTL
	}
	if c.KeyPollInterval == 0 {
		c.KeyPollInterval = 2 * time.Second
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = defaultHeaderTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = defaultIdleTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = defaultMaxConns
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = defaultMaxConnsPerIP
	}
	if c.BodyMemory <= 0 {
		c.BodyMemory = defaultBodyMemory
	}
	if c.BodyMemoryWait <= 0 {
		c.BodyMemoryWait = defaultBodyMemoryWait
	}
}

// Check is one named readiness probe (PostgreSQL reachable). The gateway adds
// its own for the store.
type Check struct {
	Name string
	Run  func(ctx context.Context) error
}

// Deps are what the gateway needs from the rest of the process.
type Deps struct {
	Log  *slog.Logger
	Keys KeySource
	// Leases runs the write protocol (keyed writes and multipart uploads'
	// attempts) and Buckets records bucket changes; both are required: no
	// write passes through unfenced.
	Leases    *lease.Manager
	Buckets   Buckets
	Readiness []Check
	// Console, when set, is the read-only web console, served on the admin
	// listener under /console/ behind the admin token.
	Console http.Handler
	// Notifications keeps buckets' notification configurations; nil answers
	// their operations NotImplemented.
	Notifications Notifications
	// Reservations checks writes to reserved keys (reserve.go); nil: no
	// reservations.
	Reservations Reservations
}

// Server is a running gateway.
type Server struct {
	cfg      Config
	deps     Deps
	s3       *fasthttp.Server
	s3Ln     net.Listener
	admin    *http.Server
	adminLn  net.Listener
	metrics  *metrics
	keys     *keyCache
	verifier *sigv4.Verifier
	store    *store.Client
	leases   *lease.Manager
	// reservations is deps.Reservations (reserve.go).
	reservations Reservations
	inflight     inflight
	// probeBucket: the start-up probe's bucket, hidden from ListBuckets
	// unless a grant names it (buckets.go).
	probeBucket atomic.Pointer[string]
	// keepsBackslash: the probe proved the store keeps '\' in keys distinct
	// from '/' (keyname.go).
	keepsBackslash atomic.Bool
	// markerKeepsObject: the probe proved that writing "p/" leaves an object
	// "p" at the store. Unproven, the store is taken to keep keys as file
	// paths (lease.WriteRequest's KeysArePaths).
	markerKeepsObject atomic.Bool
	// plainChecksums: the probe proved the store checks an
	// x-amz-checksum-crc32 header and refuses a plain body cut short, so
	// spooled bodies travel plain (forward.go, sendsPlain).
	plainChecksums atomic.Bool
	// fencingUnproven is why the store's fencing is unproven (the probe failed
	// or was skipped); "" when it was proven. Every write then says so.
	fencingUnproven atomic.Pointer[string]
	conns           *connLimiter
	bodies          *bodyBudget
	spool           *spool
	cors            *corsCache
	proxies         trustedProxies
	wg              sync.WaitGroup
	errc            chan error
}

// New loads the access keys and binds the listeners (so callers know the
// addresses at once) without serving yet.
func New(ctx context.Context, cfg Config, deps Deps) (*Server, error) {
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	cfg.applyDefaults()
	for _, b := range cfg.AnonymousWriteBuckets {
		if !ValidBucketName(b) {
			return nil, fmt.Errorf("anonymous write bucket %q: not a bucket name (name each bucket; there is no wildcard)", b)
		}
	}
	s := &Server{cfg: cfg, deps: deps, metrics: newMetrics(), errc: make(chan error, 2)}
	proxies, err := parseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	s.proxies = proxies
	s.bodies = newBodyBudget(cfg.BodyMemory, cfg.BodyMemoryWait, s.metrics)
	s.spool = newSpool(&cfg, s.metrics)
	keys, err := newKeyCache(ctx, deps.Keys, deps.Log)
	if err != nil {
		return nil, fmt.Errorf("load access keys: %w", err)
	}
	s.keys = keys
	s.verifier = &sigv4.Verifier{Secrets: keys, Region: cfg.Region, DisableV2: cfg.DisableSigV2}
	if s.store, err = store.New(cfg.Store); err != nil {
		return nil, fmt.Errorf("backend: %w", err)
	}
	s.cors = &corsCache{ttl: cfg.CORSCacheTTL, fallback: defaultCORS(cfg.CORSAllowOrigins),
		fetch: s.store.BucketCORS, now: time.Now, entries: map[string]*corsEntry{}}
	s.deps.Readiness = append(s.deps.Readiness, Check{Name: "store", Run: s.store.Ping})
	if deps.Leases == nil || deps.Buckets == nil {
		return nil, errors.New("the gateway needs the write protocol: Deps.Leases and Deps.Buckets")
	}
	s.leases = deps.Leases
	s.reservations = deps.Reservations
	s.leases.Metrics.Register(s.metrics.reg)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("S3 listener: %w", err)
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		ln.Close()
		return nil, errors.New("TLS needs both a certificate and a key")
	}
	// Below TLS, so a refused connection costs no handshake.
	s.conns = newConnLimiter(ln, cfg.MaxConns, cfg.MaxConnsPerIP, s.metrics)
	s.conns.tls = cfg.TLSCert != ""
	s.conns.sendStall = cfg.SendStallTimeout
	ln = s.conns
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("TLS: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	s.s3Ln = ln
	s.s3 = &fasthttp.Server{
		Handler:                       s.handle,
		ExpectHandler:                 s.expect,
		ErrorHandler:                  parseError,
		Name:                          "fencegate",
		DisableHeaderNamesNormalizing: true,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		StreamRequestBody:             true,
		DisablePreParseMultipartForm:  true,
		// Bodies are streamed, so no size limit applies here; stalls are caught
		// per read (BodyStallTimeout).
		MaxRequestBodySize: 1 << 62,
		ReadBufferSize:     16 << 10,
		// A GET's response head and what the store connection's 4 KiB reader
		// holds of its body fit one buffer, so they leave in one write (with
		// the 4 KiB default, two) before the rest is spliced (store/splice.go).
		// Measured with perf stat over GET 64 KiB at 32 clients: 3.0 write
		// calls per GET instead of 4.0, 13.5 system calls instead of 14.7.
		WriteBufferSize: 8 << 10,
		// ReadTimeout is the header timeout: fasthttp arms it at accept (or at a
		// keep-alive request's first byte) and nothing later re-arms it with
		// this value. Once the headers are in, the deadline becomes the stall
		// timeout for the body bytes fasthttp reads before the handler; the
		// handler's own body reads set theirs per read (bodyGuard).
		ReadTimeout: cfg.HeaderTimeout,
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			canonicalExpect(h)
			return fasthttp.RequestConfig{ReadTimeout: cfg.BodyStallTimeout}
		},
		IdleTimeout:     cfg.IdleTimeout,
		ConnState:       s.conns.connState,
		CloseOnShutdown: true,
		// fasthttp's own log of a connection it could not serve goes to the
		// gateway's log, without the request's bytes (its Authorization and
		// signature: a reader of the log could replay the request).
		Logger:                fasthttpLog{deps.Log},
		SecureErrorLogMessage: true,
	}
	if cfg.AdminListen != "" {
		aln, err := net.Listen("tcp", cfg.AdminListen)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("admin listener: %w", err)
		}
		s.adminLn = aln
		// Nothing on the admin listener streams: every request and answer is
		// bounded, and an idle keep-alive connection is closed as on the S3
		// listener, so no client holds a connection (a file descriptor the S3
		// listener needs too) for as long as it likes.
		s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: cfg.IdleTimeout}
	}
	return s, nil
}

// fasthttpLog takes fasthttp's log lines into the gateway's structured log.
type fasthttpLog struct{ log *slog.Logger }

func (l fasthttpLog) Printf(format string, args ...any) {
	l.log.Info("http server", "message", fmt.Sprintf(format, args...))
}

// Addr is the S3 API's bound address.
func (s *Server) Addr() string { return s.s3Ln.Addr().String() }

// AdminAddr is the admin listener's bound address ("" when disabled).
func (s *Server) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Serve runs until ctx is cancelled, then shuts down gracefully: it stops
// accepting, lets in-flight requests finish up to ShutdownGrace, then cuts them.
func (s *Server) Serve(ctx context.Context) error {
	pollCtx, stopPoll := context.WithCancel(context.Background())
	defer stopPoll()
	go s.keys.poll(pollCtx, s.cfg.KeyPollInterval)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.s3.Serve(s.s3Ln); err != nil {
			s.errc <- fmt.Errorf("S3 server: %w", err)
		}
	}()
	if s.admin != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.admin.Serve(s.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.errc <- fmt.Errorf("admin server: %w", err)
			}
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-s.errc:
	}
	s.shutdown()
	s.wg.Wait()
	return err
}

func (s *Server) shutdown() {
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	if err := s.s3.ShutdownWithContext(sctx); err != nil {
		ended := s.inflight.cut(10 * time.Second)
		s.deps.Log.Warn("shutdown grace ended with requests in flight: they were cut, their writes recorded and their leases released",
			"err", err, "all_ended", ended)
	}
	// fasthttp closes only the listeners its Serve has registered: a shutdown
	// that comes before Serve got that far would leave Serve accepting for
	// ever. Closing the listener here ends it either way.
	_ = s.s3Ln.Close()
	if s.admin != nil {
		_ = s.admin.Shutdown(sctx)
	}
}

// Store is the gateway's store client, for the reconciler to share.
func (s *Server) Store() *store.Client { return s.store }

// Registry is where components add their metrics (the lease counters).
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }
