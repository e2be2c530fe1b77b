package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"sync"
)

// keyCacheMax bounds the cache; a key per (access key, day, region, service)
// means a few entries per active client.
const keyCacheMax = 4096

type keyCacheKey struct{ akid, date, region, service string }

type keyCacheEntry struct {
	// secret is kept to notice a rotated secret: a stale derived key would
	// otherwise keep failing (or keep passing) until the day changes.
	secret string
	key    [32]byte
}

// keyCache maps (access key, date, region, service) to the derived signing
// key, so a warm request costs one HMAC instead of five. The zero value is
// ready; it is safe for concurrent use.
type keyCache struct {
	mu sync.RWMutex
	m  map[keyCacheKey]*keyCacheEntry
}

func (c *keyCache) get(akid, secret, date, region, service string) [32]byte {
	k := keyCacheKey{akid, date, region, service}
	c.mu.RLock()
	e := c.m[k]
	c.mu.RUnlock()
	if e != nil && len(e.secret) == len(secret) &&
		subtle.ConstantTimeCompare([]byte(e.secret), []byte(secret)) == 1 {
		return e.key
	}
	key := deriveSigningKey(secret, date, region, service)
	// Copy the strings: they usually point into a request's header value,
	// which the cache must not keep alive.
	k = keyCacheKey{clone(akid), clone(date), clone(region), clone(service)}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[keyCacheKey]*keyCacheEntry)
	}
	if len(c.m) >= keyCacheMax {
		// Drop an arbitrary quarter; entries are cheap to re-derive.
		n := keyCacheMax / 4
		for kk := range c.m {
			delete(c.m, kk)
			if n--; n == 0 {
				break
			}
		}
	}
	c.m[k] = &keyCacheEntry{secret: secret, key: key}
	c.mu.Unlock()
	return key
}

func clone(s string) string { return string([]byte(s)) }

func deriveSigningKey(secret, date, region, service string) [32]byte {
	h := func(key []byte, data string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(data))
		return m.Sum(nil)
	}
	k := h([]byte("AWS4"+secret), date)
	k = h(k, region)
	k = h(k, service)
	k = h(k, terminator)
	var out [32]byte
	copy(out[:], k)
	return out
}
