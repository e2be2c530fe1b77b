package gateway

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/sigv4"
)

// Grant allows one permission on one bucket ("*": every bucket).
type Grant struct {
	Bucket string
	Perm   Permission
}

// AccessKey is a client key as the gateway needs it.
type AccessKey struct {
	ID     string
	Secret string
	Grants []Grant
}

// KeySource is where keys live (PostgreSQL, behind meta). Version changes
// whenever any key or grant does, so polling it is one cheap query.
type KeySource interface {
	LoadKeys(ctx context.Context) (keys []AccessKey, version int64, err error)
	KeysVersion(ctx context.Context) (int64, error)
}

type keySnapshot struct {
	version int64
	byID    map[string]*AccessKey
}

// keyCache holds every key in memory so that a request costs no database round
// trip. It reloads when the source's version moves (polled), and at most once a
// second on an unknown key, so a key created a moment ago works at once.
type keyCache struct {
	src        KeySource
	log        *slog.Logger
	snap       atomic.Pointer[keySnapshot]
	reloadMu   sync.Mutex
	lastMissAt atomic.Int64 // unix nanos of the last reload caused by a miss
}

func newKeyCache(ctx context.Context, src KeySource, log *slog.Logger) (*keyCache, error) {
	c := &keyCache{src: src, log: log}
	if err := c.reload(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *keyCache) reload(ctx context.Context) error {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	keys, v, err := c.src.LoadKeys(ctx)
	if err != nil {
		return err
	}
	s := &keySnapshot{version: v, byID: make(map[string]*AccessKey, len(keys))}
	for i := range keys {
		s.byID[keys[i].ID] = &keys[i]
	}
	c.snap.Store(s)
	return nil
}

// poll reloads whenever the version moves, until ctx ends.
func (c *keyCache) poll(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := c.src.KeysVersion(qctx)
		if err == nil && v != c.snap.Load().version {
			err = c.reload(qctx)
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.Warn("access key refresh failed; keeping the cached keys", "err", err)
		}
	}
}

func (c *keyCache) lookup(id string) *AccessKey {
	if k := c.snap.Load().byID[id]; k != nil {
		return k
	}
	now := time.Now().UnixNano()
	last := c.lastMissAt.Load()
	if now-last < int64(time.Second) || !c.lastMissAt.CompareAndSwap(last, now) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.reload(ctx); err != nil {
		c.log.Warn("access key reload failed", "err", err)
		return nil
	}
	return c.snap.Load().byID[id]
}

// SecretKey makes the cache a sigv4.SecretStore.
func (c *keyCache) SecretKey(id string) (string, error) {
	if k := c.lookup(id); k != nil {
		return k.Secret, nil
	}
	return "", sigv4.ErrUnknownAccessKey
}

// allowed reports whether key may perform an operation needing perm on bucket.
// admin implies write and read; write and read are independent (upload-only
// keys are useful). reserve (upload reservations) is implied by write and
// admin, and implies nothing else.
func (k *AccessKey) allowed(perm Permission, bucket string) bool {
	if perm == PermAuthenticated {
		return true
	}
	for _, g := range k.Grants {
		if g.Bucket != "*" && g.Bucket != bucket {
			continue
		}
		if g.Perm == perm || g.Perm == PermAdmin || perm == PermReserve && g.Perm == PermWrite {
			return true
		}
	}
	return false
}

// listsBucket reports whether ListBuckets shows bucket to key: a grant on
// every bucket does not show hidden, a grant naming it does.
func (k *AccessKey) listsBucket(bucket, hidden string) bool {
	for _, g := range k.Grants {
		if g.Bucket == bucket || g.Bucket == "*" && bucket != hidden {
			return true
		}
	}
	return false
}
