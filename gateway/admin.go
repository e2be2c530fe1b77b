package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	reg              *prometheus.Registry
	requests         *prometheus.CounterVec
	latency          *prometheus.HistogramVec
	bytesIn          *prometheus.CounterVec
	bytesOut         *prometheus.CounterVec
	upstreamErrors   *prometheus.CounterVec
	splicedBytes     prometheus.Counter
	connsOpen        prometheus.Gauge
	connsRefused     *prometheus.CounterVec
	connsSendStalled prometheus.Counter
	bodyBytes        prometheus.Gauge
	bodyRefused      prometheus.Counter
	spoolMemory      prometheus.Gauge
	spoolDisk        prometheus.Gauge
	spoolFellBack    prometheus.Counter
	spoolWaits       prometheus.Counter
	// Reservations' moves this gateway made (the sweeper's expiries are
	// lease's fencegate_reservations_expired_total).
	reservationsCreated, reservationsCommitted, reservationsCancelled prometheus.Counter
	// series are requests', latency's and the byte counters' children by op
	// label and status (series.go).
	series seriesCache
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_requests_total", Help: "S3 requests by operation and HTTP status.",
		}, []string{"op", "status"}),
	}
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fencegate_request_duration_seconds", Help: "Time from request headers to the end of the response, by operation.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
	}, []string{"op"})
	m.bytesIn = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_request_body_bytes_total", Help: "Object bytes received from clients, by operation.",
	}, []string{"op"})
	m.bytesOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_response_body_bytes_total", Help: "Bytes relayed to clients, by operation.",
	}, []string{"op"})
	m.upstreamErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_upstream_errors_total", Help: "Requests the store did not answer (network errors, timeouts), by operation.",
	}, []string{"op"})
	m.splicedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_spliced_body_bytes_total", Help: "Object bytes relayed from the store to clients by splice(2), never copied through the gateway's memory.",
	})
	m.connsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_connections_open", Help: "S3 client connections open now.",
	})
	m.connsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_connections_refused_total", Help: "S3 client connections answered 503 SlowDown and closed at accept, by the limit they were over (total, per_ip).",
	}, []string{"limit"})
	m.connsRefused.WithLabelValues("total")
	m.connsRefused.WithLabelValues("per_ip")
	m.connsSendStalled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_connections_send_stalled_total", Help: "S3 client connections closed because the client took none of an answer for --send-stall-timeout.",
	})
	m.bodyBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_buffered_body_bytes", Help: "Bytes of small request bodies (XML documents read whole) held now, out of --max-body-memory.",
	})
	m.bodyRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_body_memory_refused_total", Help: "Requests answered 503 SlowDown because the small-body memory budget stayed spent.",
	})
	m.spoolMemory = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_spooled_bytes_memory", Help: "Bytes of PutObject bodies received whole and held in memory now, before their lease.",
	})
	m.spoolDisk = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_spooled_bytes_disk", Help: "Bytes of PutObject bodies received whole and held in temporary files now, before their lease.",
	})
	m.spoolFellBack = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_spool_fallbacks_total", Help: "PutObject bodies small enough to spool that streamed instead, because --spool-budget was spent.",
	})
	m.spoolWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_spool_waits_total", Help: "Spooled writes that waited: a PutObject whose body was complete and whose key was leased, or a POST object file waiting for spool space.",
	})
	m.reservationsCreated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_reservations_created_total", Help: "Upload reservations created through this gateway's API (an idempotent repeat is not counted).",
	})
	m.reservationsCommitted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_reservations_committed_total", Help: "Upload reservations committed by this gateway: a PutObject, a form or a multipart Complete under one, or a complete that committed it.",
	})
	m.reservationsCancelled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_reservations_cancelled_total", Help: "Upload reservations cancelled through this gateway's API.",
	})
	reg.MustRegister(m.requests, m.latency, m.bytesIn, m.bytesOut, m.upstreamErrors, m.splicedBytes,
		m.connsOpen, m.connsRefused, m.connsSendStalled, m.bodyBytes, m.bodyRefused, m.spoolMemory, m.spoolDisk, m.spoolFellBack, m.spoolWaits,
		m.reservationsCreated, m.reservationsCommitted, m.reservationsCancelled)
	m.series.m = m
	return m
}

// adminHandler serves /healthz (the process is up), /readyz (PostgreSQL and the
// store answer), /metrics (Prometheus) and, when wired in, the web console
// under /console/. With an admin token, all but /healthz need it; /healthz
// stays open for liveness probes.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /readyz", s.adminAuth(http.HandlerFunc(s.readyz)))
	mux.Handle("GET /metrics", s.adminAuth(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	if s.deps.Console != nil {
		mux.Handle("/console/", s.consoleAuth(s.deps.Console))
	}
	return mux
}

// readyz names each dependency and whether it answers. The error itself goes
// to the log, never to the response: it may name hosts, users or paths.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	status := http.StatusOK
	body := ""
	for _, c := range s.deps.Readiness {
		if err := c.Run(ctx); err != nil {
			status = http.StatusServiceUnavailable
			body += c.Name + ": down\n"
			s.deps.Log.Warn("readiness probe failed", "check", c.Name, "err", err)
		} else {
			body += c.Name + ": ok\n"
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

// adminAuth requires `Authorization: Bearer <AdminToken>` when a token is set.
// Both sides are hashed before the constant-time compare, so neither the
// token's bytes nor its length show in the timing.
func (s *Server) adminAuth(next http.Handler) http.Handler { return s.tokenAuth(next, false) }

// consoleAuth is adminAuth for the web console, which also takes the token as
// an HTTP Basic password (any user name): a browser asks for that itself and
// sends it with every page, where it cannot send a bearer token.
func (s *Server) consoleAuth(next http.Handler) http.Handler { return s.tokenAuth(next, true) }

func (s *Server) tokenAuth(next http.Handler, basic bool) http.Handler {
	if s.cfg.AdminToken == "" {
		return next
	}
	want := sha256.Sum256([]byte("Bearer " + s.cfg.AdminToken))
	wantBasic := sha256.Sum256([]byte(s.cfg.AdminToken))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
		ok := subtle.ConstantTimeCompare(got[:], want[:]) == 1
		if _, password, isBasic := r.BasicAuth(); basic && isBasic {
			got := sha256.Sum256([]byte(password))
			ok = subtle.ConstantTimeCompare(got[:], wantBasic[:]) == 1
		}
		if !ok {
			if basic {
				w.Header().Set("WWW-Authenticate", `Basic realm="fencegate console", charset="UTF-8"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="fencegate admin"`)
			}
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
