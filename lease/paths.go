package lease

import (
	"context"
	"strings"

	"github.com/fencegate/fencegate/store"
)

// A store that keeps keys as file paths (SeaweedFS; WriteRequest.KeysArePaths)
// has a write change, or refuse, another key than its own: the marker "p/"
// replaces an object "p", a delete of an absent "k" deletes the marker "k/",
// and keys under "k/" make a directory that refuses fencegate's conditions on
// "k". The checks below keep such a write to what S3 would do.

// pathChecks runs before a write on such a store is sent: a marker "p/" is
// refused while an object "p" exists (ErrParentIsObject), and a delete of an
// absent key is not sent while it would remove a directory (spareDirectory).
// done: the write ends here with out and err; otherwise fence is the one to
// send with.
func (w *write) pathChecks(ctx context.Context, fence Fence, fenced bool) (_ Fence, out Written, done bool, err error) {
	l, req := w.l, w.req
	if parent, isMarker := strings.CutSuffix(req.Key, "/"); isMarker && parent != "" && req.Kind != KindDelete {
		obj, err := l.head(ctx, w.st, parent)
		if err != nil {
			out, err = w.failSettle(err, "for the object the marker would replace")
			return fence, out, true, err
		}
		if obj.Exists {
			l.Fail("the store holds an object at the key without its trailing '/', which the marker's write would replace: nothing sent")
			return fence, Written{}, true, ErrParentIsObject
		}
	}
	if req.Kind == KindDelete && fenced && !fence.Exists && !strings.HasSuffix(req.Key, "/") {
		var spare bool
		if fence, spare, err = w.spareDirectory(ctx); err != nil {
			out, err = w.failSettle(err, "before a delete of an absent key")
			return fence, out, true, err
		}
		if spare {
			l.Fail("the key is absent and the store keeps a directory under its name, which the delete would remove: nothing sent")
			return fence, Written{Unsent: true}, true, nil
		}
	}
	return fence, Written{}, false, nil
}

// spareDirectory decides a delete of a key the fence says is absent, on a
// store that keeps keys as file paths: told to delete the absent key "k",
// SeaweedFS deletes its directory entry "k", which is the marker "k/" (an
// object, with its metadata, and its catalog entry), where S3 changes
// nothing. A HEAD of "k/" that finds nothing leaves the delete as it was
// (sent unconditionally: one request more than before, for absent keys
// only). One that finds something (the marker, or the store's directory of
// keys under "k/", store.Object.Directory, which SeaweedFS was not seen to
// delete with them but is spared all the same) has the key itself HEADed
// afresh: bytes there (written around the gateway) are deleted fenced on
// their ETag; none spare the directory, and the delete is not sent (spare).
func (w *write) spareDirectory(ctx context.Context) (fence Fence, spare bool, err error) {
	dir, err := w.l.head(ctx, w.st, directoryOf(w.req.Key))
	if err != nil || !dir.Exists && !dir.Directory {
		return Fence{}, false, err
	}
	if fence, err = w.l.Resettle(ctx, w.st); err != nil || fence.Exists {
		return fence, false, err
	}
	return fence, true, nil
}

// directoryRefusal names the store's own refusal of a fence while a HEAD
// shows the key as fenced: keys under "key/" make a directory there
// (ErrFenceRefused); none, with the store's directory at "key/" all the
// same, is the empty directory such keys leave behind (ErrEmptyDirectory).
// nil: neither, or the store could not tell (a failed listing or HEAD):
// the write goes on as for a key that changed around the gateway.
func (w *write) directoryRefusal(ctx context.Context) error {
	if w.keysUnderKey(ctx) {
		return ErrFenceRefused
	}
	if obj, err := w.l.head(ctx, w.st, directoryOf(w.req.Key)); err == nil && obj.Directory {
		return ErrEmptyDirectory
	}
	return nil
}

// KeyLister is a store that lists keys (store.Client). A write whose fence
// the store refused while a HEAD shows the key as fenced asks it whether the
// store holds keys under the key.
type KeyLister interface {
	ListPage(ctx context.Context, bucket, prefix, after string, max int) (store.Page, error)
}

// keysUnderKey reports keys other than the write's own under "key/" at the
// store: what SeaweedFS keeps as a directory, refusing If-None-Match on
// "key" and If-Match on "key/" (ErrFenceRefused). A failed listing says no.
func (w *write) keysUnderKey(ctx context.Context) bool {
	kl, ok := w.st.(KeyLister)
	if !ok {
		return false
	}
	prefix := directoryOf(w.req.Key)
	// Asked under the lease, before the write is sent again or given up:
	// bounded as a HEAD, and only after a refused fence.
	lctx, cancel := context.WithTimeout(ctx, headTimeout)
	defer cancel()
	page, err := kl.ListPage(lctx, w.req.Bucket, prefix, "", 2)
	if err != nil {
		return false
	}
	for _, o := range page.Objects {
		if o.Key != w.req.Key {
			return true
		}
	}
	return false
}

// directoryOf is the store's directory name for key: "key/", or the marker
// itself.
func directoryOf(key string) string {
	if strings.HasSuffix(key, "/") {
		return key
	}
	return key + "/"
}
