package conformance

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/internal/wiring"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
	"github.com/fencegate/fencegate/store"
)

// testGateway is an in-process fencegate on the package's PostgreSQL database,
// in front of a real store reached through a request-counting proxy.
type testGateway struct {
	stack.Endpoint // the gateway, with a key that may do everything
	Admin          string
	Store          stack.Endpoint // the store itself (direct)
	StoreRequests  *atomic.Int64  // requests that reached the store
	Keys           *meta.Keys
	Leases         *lease.Manager
	Server         *gateway.Server
	Service        *lease.Service // the reconciler, with gatewayOptions.Reconcile
	// Shutdown starts a graceful shutdown; Wait returns when Serve has.
	Shutdown func()
	Wait     func() error
}

// endpointWithKey is the gateway as a new access key with grants sees it.
func (g *testGateway) endpointWithKey(t *testing.T, desc string, grants ...meta.Grant) stack.Endpoint {
	t.Helper()
	k, err := g.Keys.Create(context.Background(), desc, grants)
	if err != nil {
		t.Fatal(err)
	}
	ep := g.Endpoint
	ep.AccessKey, ep.SecretKey = k.ID, k.Secret
	return ep
}

type gatewayOptions struct {
	Lease lease.Config
	Hooks lease.Hooks
	// DatabaseURL gives the gateway its own pool on this URL (a proxy in front
	// of the package's database); empty shares the package pool.
	DatabaseURL string
	// Reconcile runs the reconciler's lifecycle service with this interval:
	// by default only its unresolved-attempt work kind, else as Lifecycle
	// says (its Interval is Reconcile).
	Reconcile     time.Duration
	Lifecycle     *lease.LifecycleConfig
	Signals       lease.Signals
	ShutdownGrace time.Duration
	BodyStall     time.Duration
	TLS           bool
	Store         *stack.Endpoint // default: the run's SeaweedFS
	Domains       []string
	// Configure adjusts the gateway's configuration last (limits, timeouts).
	Configure func(*gateway.Config)
	// Stream turns the spool off: every PutObject body streams while the
	// key's lease is held (as bodies over --spool-max do).
	Stream bool
	// Wakeups is where the gateway hears of releases in other gateways, as
	// `fencegate serve` does (default: a listener on its own database
	// URL); NoWakeups runs none (its waiters poll every WaitPoll).
	Wakeups   lease.Wakeups
	NoWakeups bool
}

var (
	metaOnce  sync.Once
	metaKeys  *meta.Keys
	metaErr   error
	serverKey = meta.NewServerKey() // seals this package's access keys
)

// packageKeys is meta.Keys on this package's migrated database.
func packageKeys(t *testing.T) *meta.Keys {
	t.Helper()
	metaOnce.Do(func() {
		ctx := context.Background()
		pool, err := meta.Open(ctx, testenv.DatabaseURL(t), meta.PoolConfig{MaxConns: 16})
		if err != nil {
			metaErr = err
			return
		}
		if _, err := meta.Migrate(ctx, pool); err != nil {
			metaErr = err
			return
		}
		key, _ := meta.ParseServerKey(serverKey)
		sealer, _ := meta.NewSealer(key)
		metaKeys = &meta.Keys{Pool: pool, Sealer: sealer}
	})
	if metaErr != nil {
		t.Fatal(metaErr)
	}
	return metaKeys
}

var (
	probeOnce   sync.Once
	probeResult gateway.ProbeResult
	probeErr    error
)

// packageProbe is the start-up probe's result on the run's SeaweedFS, run once
// by the first gateway that asks (srv).
func packageProbe(t *testing.T, srv *gateway.Server) gateway.ProbeResult {
	t.Helper()
	probeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		probeResult, probeErr = srv.Probe(ctx, "fencegate-probe")
		if probeErr == nil && !probeResult.Fenced() {
			probeErr = fmt.Errorf("the probe finds SeaweedFS unfenced: %s", probeResult)
		}
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return probeResult
}

func startGateway(t *testing.T, o gatewayOptions) *testGateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st := testenv.Store(t)
	if o.Store != nil {
		st = *o.Store
	}
	counter := &atomic.Int64{}
	storeURL := startCountingProxy(t, st.URL, counter)
	keys := packageKeys(t)
	all := []meta.Grant{{Bucket: "*", Permission: meta.PermAdmin}}
	k, err := keys.Create(ctx, "conformance "+t.Name(), all)
	if err != nil {
		t.Fatal(err)
	}
	grace := o.ShutdownGrace
	if grace == 0 {
		grace = 5 * time.Second
	}
	cfg := gateway.Config{
		Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", ShutdownGrace: grace,
		Region: "us-east-1", Domains: o.Domains, BodyStallTimeout: o.BodyStall,
		Store: store.Config{Endpoint: storeURL, AccessKey: st.AccessKey, SecretKey: st.SecretKey, Region: "us-east-1"},
	}
	if o.Stream {
		cfg.SpoolMax = -1
	}
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	scheme := "http"
	if o.TLS {
		cfg.TLSCert, cfg.TLSKey = selfSignedCert(t)
		scheme = "https"
	}
	logLevel := slog.LevelWarn
	if os.Getenv("FENCEGATE_TEST_LOG") != "" {
		logLevel = slog.LevelDebug
	}
	pool := keys.Pool
	if o.DatabaseURL != "" {
		own, err := meta.Open(ctx, o.DatabaseURL, meta.PoolConfig{MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(own.Close)
		pool = own
	}
	leases, catalog := wiring.Protocol(pool, o.Lease)
	leases.Hooks = o.Hooks
	if !o.NoWakeups {
		w := o.Wakeups
		if w == nil {
			w = catalog
		}
		go func() { _ = leases.ListenForReleases(ctx, w) }()
	}
	reservationChecks := &wiring.Reservations{Store: &meta.Reservations{Pool: pool},
		LiveBucketsEvery: time.Millisecond, Leases: leases}
	srv, err := gateway.New(ctx, cfg, gateway.Deps{
		Log:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel})),
		Keys:          wiring.KeySource{Keys: keys},
		Leases:        leases,
		Buckets:       wiring.Buckets{Catalog: catalog},
		Notifications: wiring.Notifications{Targets: &meta.Targets{Pool: pool}},
		Reservations:  reservationChecks,
	})
	if err != nil {
		t.Fatal(err)
	}
	reservationChecks.Objects = srv.Store()
	if o.Store == nil {
		// What `fencegate serve` learns at start-up: the probe's result on
		// this run's SeaweedFS, proven once (spooled bodies travel plain).
		srv.ApplyProbe(packageProbe(t, srv))
	}
	var svc *lease.Service
	if o.Reconcile > 0 {
		lc := lease.LifecycleConfig{Kinds: []string{lease.KindUnresolved}}
		if o.Lifecycle != nil {
			lc = *o.Lifecycle
		}
		lc.Interval = o.Reconcile
		svc, err = lease.NewService(lc, leases, catalog, srv.Store(), nil)
		if err != nil {
			t.Fatal(err)
		}
		svc.Signals = o.Signals
		svc.Metrics = lease.NewLifecycleMetrics(srv.Registry())
		svc.Start(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	var serveErr error
	wait := func() error {
		once.Do(func() { serveErr = <-done })
		return serveErr
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("gateway: %v", err)
		}
		if svc != nil {
			svc.Wait()
		}
	})
	return &testGateway{
		Leases: leases, Server: srv, Service: svc,
		Shutdown: cancel, Wait: wait,
		Endpoint: stack.Endpoint{URL: scheme + "://" + srv.Addr(), AccessKey: k.ID, SecretKey: k.Secret, Region: "us-east-1"},
		Admin:    "http://" + srv.AdminAddr(), Store: st, StoreRequests: counter, Keys: keys,
	}
}

// startCountingProxy stands in front of a real store and counts what reaches it.
func startCountingProxy(t *testing.T, target string, n *atomic.Int64) string {
	t.Helper()
	return startStoreFront(t, target, func(w http.ResponseWriter, r *http.Request, store http.Handler) {
		n.Add(1)
		store.ServeHTTP(w, r)
	})
}

// startStoreFront starts an HTTP front of target (a store) on a free port and
// returns its URL: front sees each request first and passes it on to store,
// or answers it itself.
func startStoreFront(t *testing.T, target string, front func(w http.ResponseWriter, r *http.Request, store http.Handler)) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { front(w, r, rp) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

// selfSignedCert writes a certificate for 127.0.0.1/localhost and its key.
func selfSignedCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fencegate test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func readAllClose(t *testing.T, rc io.ReadCloser) []byte {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func randomSuffix() string { return testenv.RandomHex(4) }
