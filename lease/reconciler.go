package lease

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// ReconcilerConfig tunes the reconciler.
type ReconcilerConfig struct {
	Interval time.Duration // between scans (20 s); a scan also runs at start-up
	Batch    int           // keys claimed per scan, at most 100
	ClaimFor time.Duration // how long a claim keeps other reconcilers off a key
	// RetryAfter: a key whose settle failed or was busy is claimable again
	// after this (1 s), doubling per try up to ClaimFor.
	RetryAfter time.Duration
}

// Reconciler settles keys whose attempts are unresolved (W7, the part this
// issue needs): unknown outcomes and attempts of holders that died. To settle a
// key it holds the key's lease like any writer, so it never touches a live
// attempt of another gateway.
type Reconciler struct {
	cfg   ReconcilerConfig
	m     *Manager
	store Store
	log   *slog.Logger
}

// ScanResult counts one scan.
type ScanResult struct {
	Claimed, Settled, Busy, Errors int
}

// Validate refuses a configuration the reconciler cannot run with (zero
// values take their defaults).
func (c ReconcilerConfig) Validate() error {
	switch {
	case c.Interval < 0:
		return errors.New("reconciler interval must not be negative")
	case c.Batch < 0 || c.Batch > 100:
		return errors.New("reconciler batch must be between 1 and 100")
	case c.ClaimFor < 0:
		return errors.New("reconciler claim period must not be negative")
	case c.RetryAfter < 0:
		return errors.New("reconciler retry back-off must not be negative")
	}
	return nil
}

// NewReconciler makes a reconciler; cfg must pass Validate (zero values take
// their defaults).
func NewReconciler(cfg ReconcilerConfig, m *Manager, store Store, log *slog.Logger) *Reconciler {
	if err := cfg.Validate(); err != nil {
		panic("lease: " + err.Error())
	}
	if cfg.Interval == 0 {
		cfg.Interval = 20 * time.Second
	}
	if cfg.Batch == 0 {
		cfg.Batch = 100
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.ClaimFor == 0 {
		cfg.ClaimFor = 2 * m.cfg.TTL
	}
	if log == nil {
		log = slog.Default()
	}
	return &Reconciler{cfg: cfg, m: m, store: store, log: log}
}

// RunOnce claims one batch of keys and settles each.
func (r *Reconciler) RunOnce(ctx context.Context) (ScanResult, error) {
	var res ScanResult
	// Claims made while this gateway's session is down could not be settled.
	if _, _, err := r.m.sess.current(); err != nil {
		return res, err
	}
	dctx, cancel := r.m.dbctx(ctx)
	keys, err := r.m.db.ClaimUnresolved(dctx, r.cfg.Batch, r.m.claim(r.cfg.ClaimFor), r.m.cfg.GuardHorizon)
	cancel()
	if err != nil {
		return res, err
	}
	res.Claimed = len(keys)
	for _, k := range keys {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		err := r.settleKey(ctx, k[0], k[1])
		if err == nil {
			res.Settled++
			continue
		}
		why := err.Error()
		if err == ErrBusy {
			// A live writer holds it and settles it itself; should that
			// writer fail before it does, the key comes back soon.
			res.Busy++
			why = "skipped: a live writer held the key"
		} else {
			res.Errors++
			r.log.Warn("reconciler could not settle a key; it will be tried again", "bucket", k[0], "key", k[1], "err", err)
		}
		nctx, cancel := r.m.dbctx(ctx)
		_ = r.m.db.RetryKeyLater(nctx, k[0], k[1], r.cfg.RetryAfter, r.cfg.ClaimFor, why)
		cancel()
	}
	return res, nil
}

// keyBudget bounds the settling of one claimed key (its HEADs and commits):
// a hung store delays a pass by at most this per key, and the key is tried
// again in a later pass.
const keyBudget = 30 * time.Second

func (r *Reconciler) settleKey(ctx context.Context, bucket, key string) error {
	ctx, cancel := context.WithTimeout(ctx, keyBudget)
	defer cancel()
	return r.m.SettleKey(ctx, bucket, key, r.store, false)
}

// SettleKey holds the key's lease like any writer and brings the catalog up to
// what the store holds there. wait: wait (bounded) for a live writer; else give
// up with ErrBusy, since that writer settles the key itself.
func (m *Manager) SettleKey(ctx context.Context, bucket, key string, store Store, wait bool) error {
	l, err := m.Acquire(ctx, Request{Bucket: bucket, Key: key, Op: KindSettle, NoWait: !wait, settle: true,
		DeclaredSize: -1})
	if err != nil {
		return err
	}
	_, err = l.Settle(ctx, store)
	l.stopRenewing()
	l.finish("", "")
	return err
}
