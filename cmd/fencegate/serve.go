package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/console"
	"github.com/fencegate/fencegate/internal/notify"
	"github.com/fencegate/fencegate/internal/wiring"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
	"github.com/fencegate/fencegate/store"
)

// serveConfig is everything `fencegate serve` reads from flags and FENCEGATE_*;
// the one-shot tools fill in the parts they define.
type serveConfig struct {
	gateway.Config
	DatabaseURL    string
	ServerKey      string
	ServerKeyFile  string
	Region         string
	Store          storeConfig
	StoreAnswer    time.Duration
	Domains        string
	AnonWrite      string
	CORSOrigins    string
	SigV2          bool
	TrustedProxies string
	ConsoleSample  time.Duration
	LogLevel       string
	Migrate        bool
	DBMaxConns     int
	DBQueryTimeout time.Duration
	Lease          lease.Config
	LeaseListen    bool
	Reconcile      time.Duration
	Lifecycle      lease.LifecycleConfig
	ReconcileKinds string
	AuditBuckets   string
	ProbeBucket    string
	RequireFencing bool
	// AcceptAsyncReplication: the operator knows the database does not
	// replicate commits synchronously; the start-up warning becomes info.
	AcceptAsyncReplication bool
	// BodyMemoryBytes is gateway.Config.BodyMemory, as an int flag; the
	// spool's byte limits likewise.
	BodyMemoryBytes  int
	SpoolMaxBytes    int
	SpoolMemoryBytes int
	SpoolBudgetBytes int
	Notify           notify.Config
	NotifyOff        bool
}

const serveUsage = `usage: fencegate serve [flags]

Runs the S3 gateway: the S3 API on --listen, /healthz, /readyz and /metrics on
--admin-listen, the reconciler in the background. Needs a migrated database
(fencegate migrate, or --migrate), the server key and the store's endpoint and
keys. docs/OPERATING.md describes a deployment.
`

func (c *serveConfig) define(f envFlags) { c.defineFlags(f, true) }

// defineFlags adds serve's flags; without connections, those that name the
// database, the server key and the store, and --migrate and
// --accept-async-replication, are left out: `fencegate dev run` brings its
// own stack and takes every other setting as serve does.
func (c *serveConfig) defineFlags(f envFlags, connections bool) {
	f.heading("listeners")
	f.String(&c.Listen, "listen", "FENCEGATE_LISTEN", "127.0.0.1:9000", "S3 API listen address")
	f.String(&c.AdminListen, "admin-listen", "FENCEGATE_ADMIN_LISTEN", "127.0.0.1:9001", "admin listen address: /healthz, /readyz, /metrics (empty disables)")
	f.String(&c.AdminToken, "admin-token", "FENCEGATE_ADMIN_TOKEN", "", "when set, /readyz and /metrics require the header \"Authorization: Bearer TOKEN\" (/healthz stays open)")
	f.Duration(&c.ConsoleSample, "console-sample-interval", "FENCEGATE_CONSOLE_SAMPLE_INTERVAL", 10*time.Second, "how often the console's charts sample this gateway's counters (an hour of samples is kept in memory)")
	f.String(&c.TLSCert, "tls-cert", "FENCEGATE_TLS_CERT", "", "PEM certificate: serve the S3 API over HTTPS")
	f.String(&c.TLSKey, "tls-key", "FENCEGATE_TLS_KEY", "", "PEM private key for --tls-cert")
	f.Duration(&c.ShutdownGrace, "shutdown-grace", "FENCEGATE_SHUTDOWN_GRACE", 30*time.Second, "how long in-flight requests may finish after SIGTERM")
	if connections {
		f.database(&c.DatabaseURL)
	}
	f.Int(&c.DBMaxConns, "db-max-conns", "FENCEGATE_DB_MAX_CONNS", 32, "PostgreSQL connection pool size")
	f.Duration(&c.DBQueryTimeout, "db-statement-timeout", "FENCEGATE_DB_STATEMENT_TIMEOUT", 10*time.Second, "server-side bound on every statement")
	if connections {
		f.Bool(&c.AcceptAsyncReplication, "accept-async-replication", "FENCEGATE_ACCEPT_ASYNC_REPLICATION", false, "the database's commits need not wait for a synchronous standby (a single server, or a standby whose loss of the last commits is accepted): no start-up warning that a failover can lose acknowledged writes")
		f.Bool(&c.Migrate, "migrate", "FENCEGATE_MIGRATE", false, "apply database migrations at start-up")
		f.serverKey(&c.ServerKey, &c.ServerKeyFile)
		f.store(&c.Store)
	}
	f.Duration(&c.StoreAnswer, "store-answer-timeout", "FENCEGATE_STORE_ANSWER_TIMEOUT", store.DefaultAnswerTimeout, "the store must begin its answer to a request within this of the request's last byte, and may not stop taking a request's body or sending an answer's for longer; past it the request is given up (a write sent whole then has an unknown outcome, settled later) (negative: no bound)")
	f.String(&c.ProbeBucket, "probe-bucket", "FENCEGATE_PROBE_BUCKET", "fencegate-probe", "bucket where the start-up probe proves the store rejects mismatched conditions (empty skips the probe)")
	f.Bool(&c.RequireFencing, "require-fencing", "FENCEGATE_REQUIRE_FENCING", false, "refuse to start unless the probe proves every fenced operation and truncation safety")
	f.heading("requests")
	f.String(&c.Region, "region", "FENCEGATE_REGION", "", "region clients must sign for (empty: any region, as the store decides)")
	f.String(&c.Domains, "domains", "FENCEGATE_DOMAINS", "", "comma-separated domains for virtual-host addressing (bucket.DOMAIN)")
	f.String(&c.AnonWrite, "anonymous-write-buckets", "FENCEGATE_ANONYMOUS_WRITE_BUCKETS", "", "comma-separated buckets where requests without credentials may write (PutObject, DeleteObject(s), multipart), through the write protocol; elsewhere they are refused")
	f.String(&c.CORSOrigins, "cors-allow-origins", "FENCEGATE_CORS_ALLOW_ORIGINS", "", "comma-separated origins (each may hold one '*') allowed every method and header by CORS on buckets without a CORS configuration of their own (empty: none)")
	f.Duration(&c.CORSCacheTTL, "cors-cache-ttl", "FENCEGATE_CORS_CACHE_TTL", 10*time.Second, "how long a bucket's CORS configuration read from the store is used before it is read again")
	f.Bool(&c.SigV2, "sigv2", "FENCEGATE_SIGV2", true, "accept AWS Signature Version 2 (Authorization: AWS key:signature, and presigned URLs with AWSAccessKeyId, Signature and Expires); false answers them NotImplemented")
	f.String(&c.TrustedProxies, "trusted-proxies", "FENCEGATE_TRUSTED_PROXIES", "", "comma-separated addresses or CIDRs of reverse proxies whose Forwarded / X-Forwarded-Host, -Proto and -For headers give the Host the client signed, its scheme and its address; from any other address those headers are ignored")
	f.heading("connections and bodies")
	f.Duration(&c.BodyStallTimeout, "body-stall-timeout", "FENCEGATE_BODY_STALL_TIMEOUT", 20*time.Second, "a request body that sends nothing for this long ends with RequestTimeout")
	f.Duration(&c.SendStallTimeout, "send-stall-timeout", "FENCEGATE_SEND_STALL_TIMEOUT", time.Minute, "a client that takes none of an answer for this long (acknowledges no byte of it) has its connection closed (negative: never)")
	f.Duration(&c.HeaderTimeout, "header-timeout", "FENCEGATE_HEADER_TIMEOUT", 10*time.Second, "a connection must send a request's complete headers within this of its accept (of its first byte on a keep-alive connection), else it is closed")
	f.Duration(&c.IdleTimeout, "idle-timeout", "FENCEGATE_IDLE_TIMEOUT", 2*time.Minute, "how long a keep-alive connection may wait for its next request")
	f.Int(&c.MaxConns, "max-conns", "FENCEGATE_MAX_CONNS", 4096, "open S3 client connections at most; one more is answered 503 SlowDown and closed (-1: no limit)")
	f.Int(&c.MaxConnsPerIP, "max-conns-per-ip", "FENCEGATE_MAX_CONNS_PER_IP", 1024, "open S3 client connections per client IP at most; one more is answered 503 SlowDown and closed (-1: no limit)")
	f.Int(&c.BodyMemoryBytes, "max-body-memory", "FENCEGATE_MAX_BODY_MEMORY", 64<<20, "bytes of small request bodies (XML documents, read whole) held at once; a request that finds none free for 2 s gets 503 SlowDown")
	f.Int(&c.SpoolMaxBytes, "spool-max", "FENCEGATE_SPOOL_MAX", 16<<20, "PutObject bodies up to this many bytes are received whole before the key's lease is taken (negative: none)")
	f.Int(&c.SpoolMemoryBytes, "spool-memory", "FENCEGATE_SPOOL_MEMORY", 1<<20, "spooled bodies up to this many bytes stay in memory; larger ones go to an unlinked temporary file")
	f.Int(&c.SpoolBudgetBytes, "spool-budget", "FENCEGATE_SPOOL_BUDGET", 256<<20, "bytes of spooled bodies held at once, memory and disk; a body that finds it spent streams instead")
	f.String(&c.SpoolDir, "spool-dir", "FENCEGATE_SPOOL_DIR", "", "directory for spooled bodies' temporary files (default: the system's temporary directory)")
	c.defineLease(f)
	f.Duration(&c.Lease.WaitPollListening, "lease-poll-listening", "FENCEGATE_LEASE_POLL_LISTENING", lease.DefaultWaitPollListening, "that poll while the release listener is subscribed (releases in other gateways wake the writer at once; the poll is the fallback)")
	f.Bool(&c.LeaseListen, "lease-listen", "FENCEGATE_LEASE_LISTEN", true, "hold one PostgreSQL connection that LISTENs for releases of keys this gateway's writers wait for (off: they poll every --lease-poll)")
	f.heading("reconciler")
	f.Duration(&c.Reconcile, "reconcile-interval", "FENCEGATE_RECONCILE_INTERVAL", 20*time.Second, "reconciler period (a scan also runs at start-up)")
	c.defineLifecycle(f)
	f.heading("event notifications")
	c.defineNotify(f)
	f.heading("logs")
	f.String(&c.LogLevel, "log-level", "FENCEGATE_LOG_LEVEL", "info", "debug, info, warn or error")
}

// defineLease adds the write protocol's lease and session settings: serve's,
// and the tools' that settle keys under their leases (audit --repair, catalog
// import), which must use the gateways' (the guard horizon above all).
func (c *serveConfig) defineLease(f envFlags) {
	f.heading("leases and sessions")
	f.Duration(&c.Lease.TTL, "lease-ttl", "FENCEGATE_LEASE_TTL", 60*time.Second, "key lease lifetime (on PostgreSQL's clock)")
	f.Duration(&c.Lease.RenewEvery, "lease-renew", "FENCEGATE_LEASE_RENEW", 20*time.Second, "lease renewal period while a write is outstanding")
	f.Duration(&c.Lease.Margin, "lease-margin", "FENCEGATE_LEASE_MARGIN", 10*time.Second, "local deadline = last renewal's send time + TTL - margin")
	f.Duration(&c.Lease.WaitMax, "lease-wait", "FENCEGATE_LEASE_WAIT", 10*time.Second, "how long a writer waits for a leased key before 503 SlowDown")
	f.Duration(&c.Lease.WaitLimit, "lease-wait-max", "FENCEGATE_LEASE_WAIT_MAX", 60*time.Second, "how long in all a writer waits for a leased key while the holder's bytes keep flowing")
	f.Duration(&c.Lease.WaitPoll, "lease-poll", "FENCEGATE_LEASE_POLL", lease.DefaultWaitPoll, "how often the first writer waiting for a leased key asks for it again while no release listener is subscribed")
	f.Duration(&c.Lease.DBTimeout, "db-timeout", "FENCEGATE_DB_TIMEOUT", 5*time.Second, "client-side bound on every database call of the write protocol")
	f.Duration(&c.Lease.SessionHeartbeat, "session-heartbeat", "FENCEGATE_SESSION_HEARTBEAT", 2*time.Second, "how often the gateway extends its session on PostgreSQL's clock")
	f.Duration(&c.Lease.SessionTimeout, "session-timeout", "FENCEGATE_SESSION_TIMEOUT", 10*time.Second, "a gateway whose session is not extended for this long is dead: its keys are free for others")
	f.Duration(&c.Lease.SessionMargin, "session-margin", "FENCEGATE_SESSION_MARGIN", 2*time.Second, "local session deadline = last heartbeat's send time + session timeout - margin; past it, in-flight writes are cut and new ones refused")
	f.Duration(&c.Lease.GuardHorizon, "guard-horizon", "FENCEGATE_GUARD_HORIZON", lease.DefaultGuardHorizon, "how long a request sent to the store may still land after the gateway gave up on it (at least the store's own request-age limit, 15 min for SigV4); an unknown write older than this whose bytes are not found is closed as unable to land")
}

// store is the store flags as the store client's configuration.
func (c *serveConfig) store() store.Config {
	return store.Config{Endpoint: c.Store.Endpoint, AccessKey: c.Store.AccessKey, SecretKey: c.Store.SecretKey, Region: c.Store.Region,
		AnswerTimeout: c.StoreAnswer}
}

// validateLease refuses a zero or negative lease setting: the lease
// configuration fills in a zero with a default, so it is refused here rather
// than silently replaced.
func (c *serveConfig) validateLease() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--lease-ttl", c.Lease.TTL}, {"--lease-renew", c.Lease.RenewEvery}, {"--lease-margin", c.Lease.Margin},
		{"--lease-wait", c.Lease.WaitMax}, {"--lease-wait-max", c.Lease.WaitLimit}, {"--db-timeout", c.Lease.DBTimeout},
		{"--lease-poll", c.Lease.WaitPoll}, {"--session-heartbeat", c.Lease.SessionHeartbeat},
		{"--session-timeout", c.Lease.SessionTimeout}, {"--session-margin", c.Lease.SessionMargin},
		{"--guard-horizon", c.Lease.GuardHorizon},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be a positive duration (got %v)", d.flag, d.v)
		}
	}
	if err := c.Lease.Validate(); err != nil {
		return fmt.Errorf("--lease-renew, --lease-ttl, --lease-margin, --lease-wait-max, --session-*: %w", err)
	}
	return nil
}

// validate checks serve's whole configuration (also dev run's).
func (c *serveConfig) validate() error {
	var missing []string
	for _, m := range []struct{ v, name string }{{c.DatabaseURL, "--database-url or $FENCEGATE_DATABASE_URL"},
		{c.Store.Endpoint, "--store-endpoint or $FENCEGATE_STORE_ENDPOINT"}, {c.Store.AccessKey, "--store-access-key or $FENCEGATE_STORE_ACCESS_KEY_ID"},
		{c.Store.SecretKey, "--store-secret-key or $FENCEGATE_STORE_SECRET_ACCESS_KEY"}} {
		if m.v == "" {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing configuration: set %s", strings.Join(missing, "; "))
	}
	// The reconciler's ticker panics on a negative period.
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--lease-poll-listening", c.Lease.WaitPollListening}, {"--reconcile-interval", c.Reconcile}, {"--console-sample-interval", c.ConsoleSample}} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be a positive duration (got %v)", d.flag, d.v)
		}
	}
	if err := c.validateLease(); err != nil {
		return err
	}
	return c.validateLifecycle()
}

func cmdServe(ctx context.Context, args []string) error {
	var cfg serveConfig
	f := newFlags("serve", serveUsage)
	cfg.define(f)
	if err := f.Parse(args); err != nil {
		return err
	}
	return runServe(ctx, cfg, nil)
}

// newLogger logs JSON lines to w at level.
func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// runServe runs the gateway until ctx ends. started, if set, is told the bound
// addresses once the gateway accepts requests.
func runServe(ctx context.Context, cfg serveConfig, started func(s3Addr, adminAddr string)) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	logOut := newLogWriter(os.Stderr)
	defer logOut.Close()
	log := newLogger(logOut, cfg.LogLevel)
	keyText, err := loadServerKey(cfg.ServerKey, cfg.ServerKeyFile)
	if err != nil {
		return err
	}
	serverKey, err := meta.ParseServerKey(keyText)
	if err != nil {
		return err
	}
	sealer, err := meta.NewSealer(serverKey)
	if err != nil {
		return err
	}
	pool, err := meta.Open(ctx, cfg.DatabaseURL, meta.PoolConfig{
		MaxConns: int32(cfg.DBMaxConns), ConnectTimeout: 10 * time.Second,
		StatementTimeout: cfg.DBQueryTimeout, ApplicationName: "fencegate serve",
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	if cfg.Migrate {
		if _, err := meta.Migrate(ctx, pool); err != nil {
			return err
		}
	}
	if err := checkSchema(ctx, pool); err != nil {
		return err
	}
	if err := meta.CheckSessionPooling(ctx, pool); err != nil {
		return err
	}
	checkReplication(ctx, pool, cfg.AcceptAsyncReplication, log)
	gcfg := cfg.Config
	gcfg.Region = cfg.Region
	gcfg.BodyMemory = int64(cfg.BodyMemoryBytes)
	gcfg.SpoolMax, gcfg.SpoolMemory, gcfg.SpoolBudget = int64(cfg.SpoolMaxBytes), int64(cfg.SpoolMemoryBytes), int64(cfg.SpoolBudgetBytes)
	gcfg.Store = cfg.store()
	for _, d := range strings.Split(cfg.Domains, ",") {
		if d = strings.TrimSpace(d); d != "" {
			gcfg.Domains = append(gcfg.Domains, d)
		}
	}
	for _, b := range strings.Split(cfg.AnonWrite, ",") {
		if b = strings.TrimSpace(b); b != "" {
			gcfg.AnonymousWriteBuckets = append(gcfg.AnonymousWriteBuckets, b)
		}
	}
	for _, o := range strings.Split(cfg.CORSOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			gcfg.CORSAllowOrigins = append(gcfg.CORSAllowOrigins, o)
		}
	}
	gcfg.DisableSigV2 = !cfg.SigV2
	for _, p := range strings.Split(cfg.TrustedProxies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			gcfg.TrustedProxies = append(gcfg.TrustedProxies, p)
		}
	}
	leases, catalog := wiring.Protocol(pool, cfg.Lease)
	// The gateway's session: every key lease it takes names it, and its keys
	// are free for others once it ends (below, on a clean shutdown) or stops
	// being extended (a crash, a partition).
	if err := leases.StartSession(ctx); err != nil {
		return fmt.Errorf("open the gateway's session: %w", err)
	}
	defer func() {
		if err := leases.EndSession(context.Background()); err != nil {
			log.Warn("could not end the gateway's session; its keys are free once it expires", "err", err)
		}
	}()
	if cfg.LeaseListen {
		// Releases in other gateways of keys this gateway's writers wait
		// for wake them at once; until ctx ends (shutdown).
		go func() { _ = leases.ListenForReleases(ctx, catalog) }()
	}
	samples := console.NewSampler(cfg.ConsoleSample)
	reservationChecks := &wiring.Reservations{Store: &meta.Reservations{Pool: pool}, Leases: leases}
	srv, err := gateway.New(ctx, gcfg, gateway.Deps{
		Log:     log,
		Leases:  leases,
		Buckets: wiring.Buckets{Catalog: catalog},
		Keys:    wiring.KeySource{Keys: &meta.Keys{Pool: pool, Sealer: sealer}},
		Console: (&console.Console{Catalog: &meta.Catalog{Pool: pool},
			UploadIdle: cfg.Lifecycle.UploadIdle, UploadCreateSettle: cfg.Lifecycle.UploadCreateSettle, Samples: samples}).Handler(),
		// Buckets' notification configurations; the events are delivered by
		// the notify service below.
		Notifications: wiring.Notifications{Targets: &meta.Targets{Pool: pool}},
		Reservations:  reservationChecks,
		Readiness: []gateway.Check{
			{Name: "postgres", Run: func(ctx context.Context) error { return pool.Ping(ctx) }},
			{Name: "session", Run: func(context.Context) error {
				if leases.SessionID() == "" {
					return lease.ErrNoSession
				}
				return nil
			}},
		},
	})
	if err != nil {
		return err
	}
	// The charts' samples of this gateway's own counters, until shutdown.
	go samples.Run(ctx, srv.Registry())
	reservationChecks.Objects = srv.Store() // complete's HEAD, before the gateway serves
	if err := probeStore(ctx, srv, cfg, log); err != nil {
		return err
	}
	lc := cfg.lifecycle()
	lc.At = gateway.LifecycleFailpoints() // nil but in the tests' build (-tags failpoint)
	svc, err := lease.NewService(lc, leases, catalog, srv.Store(), log)
	if err != nil {
		return err
	}
	svc.Metrics = lease.NewLifecycleMetrics(srv.Registry())
	recCtx, stopRec := context.WithCancel(ctx)
	svc.Start(recCtx)
	// Runs before the session ends (defers run last-in first-out): the
	// reconciler's pass in progress is waited for (its store calls are
	// cancelled; claimed items stay claimed and are tried again) and its
	// leases are released first.
	defer func() {
		stopRec()
		svc.Wait()
	}()
	// Event notifications: delivered while this gateway holds a target's
	// claim; stopped (claims released) before the session ends.
	notifyCtx, stopNotify := context.WithCancel(ctx)
	waitNotify := startNotify(notifyCtx, cfg, pool, sealer, leases.SessionID, srv.Registry(), log)
	defer func() {
		stopNotify()
		waitNotify()
	}()
	log.Info("fencegate serving", "s3", srv.Addr(), "admin", srv.AdminAddr(), "store", cfg.Store.Endpoint)
	if started != nil {
		started(srv.Addr(), srv.AdminAddr())
	}
	return srv.Serve(ctx)
}

// checkReplication warns at start when the database acknowledges commits a
// promoted standby may not have (docs/SCALING.md): after a failover an
// acknowledged write's generation would be gone.
func checkReplication(ctx context.Context, q meta.Querier, accepted bool, log *slog.Logger) {
	r, err := meta.ReadReplication(ctx, q)
	if err != nil {
		log.Warn("could not read the database's replication settings", "err", err)
		return
	}
	risk := r.Risk()
	switch {
	case risk == "" && r.SyncStandbys == 0:
		log.Warn("no synchronous standby is connected: every commit waits until one is", "synchronous_standby_names", r.StandbyNames)
	case risk == "":
		log.Info("the database replicates commits synchronously", "synchronous_commit", r.SynchronousCommit, "synchronous_standby_names", r.StandbyNames, "sync_standbys", r.SyncStandbys)
	case accepted:
		log.Info("asynchronous replication accepted (--accept-async-replication)", "reason", risk)
	default:
		log.Warn("ASYNCHRONOUS REPLICATION: a write the gateway acknowledged can be lost if the database fails over to a standby that had not received it; replicate synchronously, or say it is accepted with --accept-async-replication", "reason", risk)
	}
}

func checkSchema(ctx context.Context, pool interface {
	meta.Querier
}) error {
	ms, err := meta.Migrations()
	if err != nil {
		return err
	}
	v, err := meta.SchemaVersion(ctx, pool)
	if err != nil || v < ms[len(ms)-1].Version {
		return errors.New("the database schema is not up to date: run `fencegate migrate` (or serve with --migrate)")
	}
	return nil
}

// probeStore proves the store's conditional writes and truncation handling
// (docs/DESIGN.md, W3 and W9). A store that fails runs in a weaker mode, loudly, unless
// --require-fencing refuses it.
func probeStore(ctx context.Context, srv *gateway.Server, cfg serveConfig, log *slog.Logger) error {
	if cfg.ProbeBucket == "" {
		if cfg.RequireFencing {
			return errors.New("--require-fencing needs the start-up probe (set --probe-bucket)")
		}
		log.Warn("start-up probe skipped: the store's fencing is unproven")
		srv.FencingUnproven("the start-up probe was skipped")
		return nil
	}
	res, err := srv.Probe(ctx, cfg.ProbeBucket)
	switch {
	case err != nil && cfg.RequireFencing:
		return fmt.Errorf("start-up probe: %w", err)
	case err != nil:
		log.Error("START-UP PROBE FAILED: the store's fencing is unproven; writes are NOT protected against stale writers", "err", err)
		srv.FencingUnproven("the start-up probe failed: " + err.Error())
	case !res.Fenced() && cfg.RequireFencing:
		return fmt.Errorf("the store does not reject mismatched conditions (--require-fencing): %s", res)
	case !res.Fenced():
		log.Error("WEAKER MODE: the store does not reject every mismatched condition or truncated body; a writer that lost its lease may overwrite newer data", "probe", res.String())
		srv.FencingUnproven(res.String())
	default:
		log.Info("start-up probe: the store rejects mismatched conditions and truncated bodies", "probe", res.String())
	}
	return nil
}
