package wiring

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/meta"
)

// CompleteReservation serves the API's complete (docs/RESERVATIONS.md): it
// verifies the bytes at the reservation's key against the store (HEAD with
// checksum mode: present, the reserved size or at most the maximum, the
// reserved checksum as the store's of that algorithm), settles the key through the lease manager so the
// catalog records them (a write through fencegate already committed the
// reservation; bytes written around the gateway become an external
// generation, an unknown attempt's an adopted one, whose commit trigger
// commits the reservation), and then commits the reservation on the
// catalog's current generation when it is those bytes. Every repeat answers
// the current state; nothing changes on a refusal.
func (w *Reservations) CompleteReservation(ctx context.Context, id string) (reservations.Reservation, error) {
	r, err := w.Store.Get(ctx, id)
	switch {
	case err != nil:
		return View(r), apiError(err)
	case r.State == meta.ReservationCommitted:
		return View(r), nil
	case r.State != meta.ReservationReserved:
		return View(r), reservations.ErrNotLive
	case w.Leases == nil || w.Objects == nil:
		return View(r), errors.New("complete needs the lease manager and the store")
	}
	obj, err := w.Objects.Head(ctx, r.Bucket, r.Key)
	if err != nil {
		return View(r), err
	}
	if e := verifyUpload(r, obj.Exists, obj.Size, obj.Checksum); e != nil {
		return View(r), e
	}
	if err := w.Leases.SettleKey(ctx, r.Bucket, r.Key, w.Objects, true); err != nil {
		return View(r), err
	}
	done, err := w.Store.Complete(ctx, id, obj.ETag, obj.Size)
	switch {
	case errors.Is(err, meta.ErrNotUploaded):
		// The key changed between the HEAD and the settle: the bytes the
		// caller sent are not the key's now.
		return View(done), reservations.ErrNotUploaded
	case errors.Is(err, meta.ErrUploadMismatch):
		return View(done), errUploadSize
	}
	return View(done), apiError(err)
}

var errUploadSize = &reservations.APIError{Status: http.StatusBadRequest, Code: "InvalidArgument",
	Message: "The object's size does not match its reservation."}

// verifyUpload checks what the store holds at a reservation's key (a HEAD's
// answer: whether it exists, its size, its checksums as store.Object writes
// them) against the reservation.
func verifyUpload(r meta.Reservation, exists bool, size int64, checksums string) error {
	switch {
	case !exists:
		return reservations.ErrNotUploaded
	case r.MaxSize != nil && size > *r.MaxSize, r.ExactSize != nil && size > *r.ExactSize:
		return &reservations.APIError{Status: http.StatusBadRequest, Code: "EntityTooLarge",
			Message: "The object is larger than its reservation allows."}
	case r.ExactSize != nil && size != *r.ExactSize:
		return errUploadSize
	}
	if alg, value := r.Checksum(); alg != "" && !hasChecksum(checksums, alg+":"+value) { // store.ChecksumValue's form
		return &reservations.APIError{Status: http.StatusBadRequest, Code: "BadDigest",
			Message: "The store reports no x-amz-checksum-" + alg + " for the object, or another than the reservation's."}
	}
	return nil
}

func hasChecksum(all, want string) bool {
	for _, c := range strings.Fields(all) {
		if c == want {
			return true
		}
	}
	return false
}
