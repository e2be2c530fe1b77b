package gateway

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// requestSeries are the per-request metrics of one op label and status: the
// children of the labelled vectors, found once. A vector's WithLabelValues
// hashes and checks its label values and takes a lock on every call; the
// cache below is a lock-free map read.
type requestSeries struct {
	requests          prometheus.Counter
	latency           prometheus.Observer
	bytesIn, bytesOut prometheus.Counter
}

type seriesKey struct {
	op     string
	status int // 0 for a status outside 100-599 (statusLabel's "invalid")
}

// seriesCache creates each series on its first request, as WithLabelValues
// would (so /metrics shows no series before its first request). Its map is
// replaced, never changed: readers need no lock. Op labels are a fixed set
// (opLabel) and statuses real HTTP codes, so it stays small.
type seriesCache struct {
	m    *metrics
	mu   sync.Mutex // serializes additions
	byOp atomic.Pointer[map[seriesKey]*requestSeries]
}

func (c *seriesCache) get(op string, status int) *requestSeries {
	k := seriesKey{op, status}
	if status < 100 || status > 599 {
		k.status = 0
	}
	if m := c.byOp.Load(); m != nil {
		if s := (*m)[k]; s != nil {
			return s
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.byOp.Load()
	if old != nil {
		if s := (*old)[k]; s != nil {
			return s
		}
	}
	s := &requestSeries{
		requests: c.m.requests.WithLabelValues(op, statusLabel(status)),
		latency:  c.m.latency.WithLabelValues(op),
		bytesIn:  c.m.bytesIn.WithLabelValues(op),
		bytesOut: c.m.bytesOut.WithLabelValues(op),
	}
	next := make(map[seriesKey]*requestSeries, 1)
	if old != nil {
		next = make(map[seriesKey]*requestSeries, len(*old)+1)
		for kk, v := range *old {
			next[kk] = v
		}
	}
	next[k] = s
	c.byOp.Store(&next)
	return s
}
