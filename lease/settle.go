package lease

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate/store"
)

// Store is the storage I/O settling needs.
type Store interface {
	Head(ctx context.Context, bucket, key string) (store.Object, error)
}

// headTimeout bounds the HEAD that attributes a key's bytes.
const headTimeout = 30 * time.Second

// Fence is the key's state a write must be conditioned on at the store:
// If-Match ETag when Exists, else If-None-Match: *.
type Fence struct {
	Exists bool
	ETag   string
}

// Settle brings the catalog up to what the store holds at the lease's key
// before a write (W3): when the key has unresolved attempts, or the catalog has
// never seen it and its bucket is not known complete, it HEADs the key and
// attributes the bytes by their attempt id. A landed unknown attempt (size
// matching what it declared) is adopted as a new generation; bytes with no or
// a foreign attempt id become an external generation; a key gone from under a
// live catalog row gets a delete generation. All of it is committed under this
// lease, with no storage I/O inside any transaction. It returns the fence for
// the write that follows.
func (l *Lease) Settle(ctx context.Context, store Store) (Fence, error) {
	return l.settle(ctx, store, l.req.settle)
}

// Resettle settles the key from a fresh HEAD, whatever the catalog says: the
// store has just refused a fence built from the catalog (the key changed
// around the gateway), or a write whose effect the catalog cannot predict (a
// versioned delete) has run. Trusting the catalog here would fence the next
// write on the same stale state forever.
func (l *Lease) Resettle(ctx context.Context, store Store) (Fence, error) {
	l.acquiredState = nil
	return l.settle(ctx, store, true)
}

func (l *Lease) settle(ctx context.Context, store Store, mustHead bool) (Fence, error) {
	m := l.m
	var ks KeyState
	if l.acquiredState != nil {
		ks, l.acquiredState = *l.acquiredState, nil
	} else {
		dctx, cancel := m.dbctx(ctx)
		var err error
		ks, err = m.db.KeyState(dctx, l.Bucket, l.Key)
		cancel()
		if err != nil {
			return Fence{}, err
		}
	}
	var unresolved []Attempt
	for _, a := range ks.Unresolved {
		if a.ID != l.AttemptID {
			unresolved = append(unresolved, a)
		}
	}
	e := ks.Entry
	if len(unresolved) == 0 && (e != nil || ks.BucketComplete) && !mustHead {
		m.Metrics.Settlements.WithLabelValues("in_sync").Inc()
		return fenceOf(e), nil
	}
	obj, err := l.head(ctx, store, l.Key)
	if err != nil {
		return Fence{}, fmt.Errorf("settle %s/%s: %w", l.Bucket, l.Key, err)
	}
	if l.IsLost() {
		return Fence{}, ErrLeaseLost
	}
	adopted, err := l.record(ctx, e, unresolved, obj)
	if err != nil {
		return Fence{}, err
	}
	if err := l.closePastHorizon(ctx, unresolved, adopted); err != nil {
		return Fence{}, err
	}
	dctx, cancel := m.dbctx(ctx)
	defer cancel()
	if err := m.db.MarkDeadUnknown(dctx, l.Bucket, l.Key); err != nil {
		return Fence{}, err
	}
	if obj.Exists {
		return Fence{Exists: true, ETag: obj.ETag}, nil
	}
	return Fence{}, nil
}

// head HEADs key, the lease's own or one beside it, bounded and dying with
// the lease.
func (l *Lease) head(ctx context.Context, st Store, key string) (store.Object, error) {
	hctx, cancel := context.WithTimeout(ctx, headTimeout)
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel)
	defer stop()
	return st.Head(hctx, l.Bucket, key)
}

func fenceOf(e *Entry) Fence {
	if e == nil || e.Deleted {
		return Fence{}
	}
	return Fence{Exists: true, ETag: e.ETag}
}

// record commits what the HEAD found, if the catalog does not already say it,
// and returns the attempt it adopted ("" if none).
func (l *Lease) record(ctx context.Context, e *Entry, unresolved []Attempt, obj store.Object) (string, error) {
	m := l.m
	p := CommitParams{Bucket: l.Bucket, Key: l.Key, Holder: l.AttemptID}
	kind := ""
	switch {
	case !obj.Exists && (e == nil || e.Deleted):
		m.Metrics.Settlements.WithLabelValues("in_sync").Inc()
		return "", nil
	case !obj.Exists:
		p.Entry = Entry{Deleted: true, Origin: OriginExternal}
		kind = "deleted_external"
		for _, a := range unresolved {
			if a.Op == KindDelete {
				p.Settled, p.SettledState = a.ID, StateAdopted
				p.Entry.Origin, p.Entry.AttemptID = OriginAdopted, a.ID
				kind = "deleted_adopted"
				break
			}
		}
	case e != nil && !e.Deleted && e.ETag == obj.ETag && (e.AttemptID == obj.AttemptID || obj.AttemptID == ""):
		// The same bytes. A store may drop the attribution metadata of some
		// objects (SeaweedFS keeps none on keys ending in "/"): same ETag and
		// no id is still the catalog's generation.
		m.Metrics.Settlements.WithLabelValues("in_sync").Inc()
		return "", nil
	default:
		p.Entry = Entry{ETag: obj.ETag, Size: obj.Size, Origin: OriginExternal}
		kind = "external"
		a, ours := l.attemptOnBytes(ctx, unresolved, obj)
		try, isTry := uploadTry(a, unresolved)
		switch {
		case ours && isTry:
			// A multipart upload's bytes, published by one of its Complete
			// tries whose outcome was unknown (an upload completes once, so
			// which try does not matter): that try is adopted, and the commit
			// marks the upload published.
			p.Settled, p.SettledState = try.ID, StateAdopted
			p.Entry.Origin, p.Entry.AttemptID = OriginAdopted, a.ID
			kind = "adopted"
		case ours && adoptable(a, obj):
			p.Settled, p.SettledState = a.ID, StateAdopted
			p.Entry.Origin, p.Entry.AttemptID = OriginAdopted, a.ID
			kind = "adopted"
		case ours && (a.State == StateCommitted || a.State == StateAdopted || a.Op == KindMultipart):
			// An earlier generation's bytes, current again (a versioned
			// bucket's newer version was deleted), or an upload of fencegate's
			// completed straight at the store: found, not written now, but
			// with their true attribution, so the catalog matches the store.
			p.Entry.AttemptID = a.ID
		}
	}
	dctx, cancel := m.dbctx(ctx)
	defer cancel()
	if _, err := m.db.Commit(dctx, p); err != nil {
		return "", err
	}
	m.Metrics.Settlements.WithLabelValues(kind).Inc()
	return p.Settled, nil
}

// horizonReason starts the reason a guard closed past its horizon is
// recorded with; the chaos checker reads it (internal/chaos/catalog.go).
const horizonReason = "past its horizon"

// closePastHorizon ends the unknown attempts that were past the guard
// horizon when the key's state was read, before the HEAD: none of them can
// land after that HEAD, and the HEAD did not find their bytes (or record
// adopted them), so none ever will. Each may have landed before and been
// replaced; the generation recorded with it says after which generation it
// cannot have landed (docs/DESIGN.md, "When a guard ends").
func (l *Lease) closePastHorizon(ctx context.Context, unresolved []Attempt, adopted string) error {
	horizon := l.m.cfg.GuardHorizon
	var ids []string
	for _, a := range unresolved {
		if a.State == StateUnknown && a.ID != adopted && a.InState > horizon {
			ids = append(ids, a.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	dctx, cancel := l.m.dbctx(ctx)
	defer cancel()
	reason := fmt.Sprintf("%s (%s): a HEAD after it found other bytes; it can no longer land", horizonReason, horizon)
	if err := l.m.db.CloseGuards(dctx, l.Bucket, l.Key, ids, reason); err != nil {
		return err
	}
	l.m.Metrics.Settlements.WithLabelValues("closed_past_horizon").Add(float64(len(ids)))
	return nil
}

// attemptOnBytes finds this key's attempt whose id the bytes carry: among the
// unresolved ones, or any other (one lookup), so that record can tell a landing
// to adopt from an earlier generation's bytes and from foreign ones.
func (l *Lease) attemptOnBytes(ctx context.Context, unresolved []Attempt, obj store.Object) (Attempt, bool) {
	if obj.AttemptID == "" {
		return Attempt{}, false
	}
	for _, u := range unresolved {
		if u.ID == obj.AttemptID {
			return u, true
		}
	}
	dctx, cancel := l.m.dbctx(ctx)
	defer cancel()
	a, err := l.m.db.AttemptByID(dctx, obj.AttemptID)
	if err != nil || a.Bucket != l.Bucket || a.Key != l.Key {
		return Attempt{}, false
	}
	return a, true
}

// uploadTry finds, for bytes that carry a multipart upload's attempt id, an
// unresolved Complete try of that upload.
func uploadTry(upload Attempt, unresolved []Attempt) (Attempt, bool) {
	if upload.Op != KindMultipart {
		return Attempt{}, false
	}
	for _, t := range unresolved {
		if t.UploadAttempt == upload.ID {
			return t, true
		}
	}
	return Attempt{}, false
}

// adoptable reports a landing to adopt: an unresolved attempt, or one already
// retired as failed (the documented ETag limit, or a fence that reopened):
// bytes never lie about who wrote them. They must be what it declared: its
// size, and its checksum when both it and the store know one.
func adoptable(a Attempt, obj store.Object) bool {
	unresolved := a.State == StateUnknown || a.State == StateLeased
	if !unresolved && a.State != StateFailed {
		return false
	}
	if a.Op == KindDelete || a.Op == KindMultipart || a.DeclaredSize >= 0 && a.DeclaredSize != obj.Size {
		return false
	}
	return !checksumsDiffer(a.Checksum, obj.Checksum)
}

// checksumsDiffer reports an attempt's checksum ("alg:value") that
// disagrees with the store's checksum of the same algorithm, among the
// store's (Object.Checksum: space separated, as a store may report several);
// other algorithms, or a missing one, prove nothing.
func checksumsDiffer(attempt, stored string) bool {
	alg, val, ok := strings.Cut(attempt, ":")
	if !ok {
		return false
	}
	for _, s := range strings.Fields(stored) {
		if a, v, ok := strings.Cut(s, ":"); ok && a == alg {
			return v != val
		}
	}
	return false
}
