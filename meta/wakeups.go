package meta

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReleaseChannel is the channel a key's release is announced on when a
// writer of another gateway waits for it (migrations/0008_release_wakeups.sql):
// NOTIFY inside the releasing transaction, payload lease.KeyHash(bucket, key).
const ReleaseChannel = "fencegate_lease_released"

// The release listener's timings. A listener that hears nothing for
// listenIdle pings its connection, so a silently dead one (a partition, a
// server gone without a reset) is noticed within listenIdle+listenTimeout;
// reconnects back off from listenBackoffMin, doubling to listenBackoffMax.
const (
	listenIdle       = 5 * time.Second
	listenTimeout    = 3 * time.Second
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// ListenReleases holds one dedicated connection (not the pool's: a
// listening connection must stay open and idle) that LISTENs on
// ReleaseChannel, until ctx ends. It calls listening(true) once a
// subscription is in place (after every reconnect), listening(false) when
// it is lost, and released(hash) for every notification received while
// subscribed; all calls come from the calling goroutine, in order, and must
// not block (PostgreSQL keeps notifications until every listener has read
// them). A lost connection is reconnected with backoff. It returns ctx's
// error.
func (c *Catalog) ListenReleases(ctx context.Context, listening func(up bool), released func(keyHash string)) error {
	backoff := listenBackoffMin
	for {
		subscribed, _ := c.listenOnce(ctx, listening, released)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if subscribed {
			backoff = listenBackoffMin
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// listenOnce connects, subscribes and relays notifications until the
// connection fails; subscribed reports whether it got as far as listening.
func (c *Catalog) listenOnce(ctx context.Context, listening func(bool), released func(string)) (subscribed bool, err error) {
	cfg := c.Pool.Config().ConnConfig
	if name := cfg.RuntimeParams["application_name"]; name != "" {
		cfg.RuntimeParams["application_name"] = name + " (release listener)"
	}
	cctx, cancel := context.WithTimeout(ctx, listenTimeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
	}()
	cctx, cancel = context.WithTimeout(ctx, listenTimeout)
	_, err = conn.Exec(cctx, "LISTEN "+ReleaseChannel)
	cancel()
	if err != nil {
		return false, err
	}
	listening(true)
	defer listening(false)
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err == nil {
			if n.Channel == ReleaseChannel {
				released(n.Payload)
			}
			continue
		}
		if ctx.Err() != nil || conn.IsClosed() {
			return true, err
		}
		// Quiet for listenIdle (or a read error that left the connection
		// open): prove the connection still answers.
		pctx, cancel := context.WithTimeout(ctx, listenTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return true, err
		}
	}
}
