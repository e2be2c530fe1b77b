package gateway

import (
	"context"
	"encoding/xml"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/store"
)

// A multipart upload under a reservation (docs/RESERVATIONS.md): its
// CreateMultipartUpload carries the reservation (the x-fencegate-reservation
// parameter, as a PUT does) and binds its attempt to it before the store
// sees it; the upload is then the reservation's. Its parts, list, abort and
// complete are permitted to the reserving key by that binding (a key that
// may only reserve in the bucket), and its Complete is checked against the
// reservation (live, the parts' total size) before it is sent. The
// Complete's generation names the Create's attempt, so the commit trigger
// commits the reservation with it, once.

var (
	errReservationMultipartChecksum = newAPIError("InvalidRequest", http.StatusBadRequest,
		"The reservation names a checksum, which a multipart upload cannot be verified against; upload it with the reservation's PUT URL or form.")
	errInvalidPart = newAPIError("InvalidPart", http.StatusBadRequest,
		"One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.")
)

// reservedUploadOp reports the calls on a multipart upload its binding to a
// reservation permits the reserving key.
func reservedUploadOp(name string) bool {
	switch name {
	case "UploadPart", "ListParts", "AbortMultipartUpload", "CompleteMultipartUpload":
		return true
	}
	return false
}

// uploadReservation is the reservation upload uploadID at r's key was bound
// to at its Create ("" when none, or when fencegate does not know the
// upload at that key).
func (s *Server) uploadReservation(ctx context.Context, r *request, uploadID string) (string, error) {
	if s.reservations == nil || uploadID == "" || !utf8.ValidString(uploadID) || strings.IndexByte(uploadID, 0) >= 0 {
		return "", nil
	}
	a, tracked, err := s.leases.UploadByID(ctx, uploadID)
	if err != nil {
		return "", err
	}
	return s.boundUpload(ctx, r, a, tracked)
}

// boundUpload is the reservation upload a (tracked: fencegate recorded it)
// was bound to, when it is r's key's.
func (s *Server) boundUpload(ctx context.Context, r *request, a lease.Upload, tracked bool) (string, error) {
	if !tracked || a.Bucket != r.bucket || a.Key != r.key {
		return "", nil
	}
	id, _, err := s.reservations.BoundTo(ctx, a.AttemptID)
	return id, err
}

// admitReservedUpload admits a call on a multipart upload from a key whose
// grant on the bucket is reserve alone: the upload must be bound to a
// reservation this key made for this key, live (its abort and list are
// let through after it ended, so the key can clean up); a part must fit
// the reservation's size.
func (s *Server) admitReservedUpload(r *request, uploadID string) (string, *apiError) {
	ctx, cancel := s.dbctx()
	defer cancel()
	id, err := s.uploadReservation(ctx, r, uploadID)
	if err != nil {
		s.deps.Log.Warn("reservation check failed", "request_id", r.id, "err", err)
		return "", errReservationUnchecked
	}
	if id == "" {
		return "", errAccessDenied
	}
	u, e := s.liveReservation(ctx, r, id)
	switch {
	case e == errReservationEnded && (r.op.Name == "AbortMultipartUpload" || r.op.Name == "ListParts"):
		return id, nil
	case e != nil:
		return "", e
	}
	if r.op.Name == "UploadPart" && r.auth != nil {
		n := r.auth.ContentLength
		if r.auth.Payload.Chunked() {
			n = r.auth.DecodedContentLength
		}
		if u.MaxSize >= 0 && n > u.MaxSize || u.ExactSize >= 0 && n > u.ExactSize {
			return "", errReservationTooLarge
		}
	}
	return id, nil
}

// completeReservation decides whether a Complete of upload a (tracked:
// fencegate recorded it) may publish r's key: an upload bound to a
// reservation must be completed by the reserving key while the reservation
// is live, and is then written under it (r.reservation); an upload bound
// to none is refused when the key has a live reservation.
func (s *Server) completeReservation(r *request, a lease.Upload, tracked bool) (ReservedUpload, *apiError) {
	if s.reservations == nil {
		return ReservedUpload{}, nil
	}
	ctx, cancel := s.dbctx()
	defer cancel()
	id, err := s.boundUpload(ctx, r, a, tracked)
	if err != nil {
		s.deps.Log.Warn("reservation check failed", "request_id", r.id, "err", err)
		return ReservedUpload{}, errReservationUnchecked
	}
	if id == "" {
		reserved, err := s.reservations.Reserved(ctx, r.bucket, r.key)
		switch {
		case err != nil:
			s.deps.Log.Warn("reservation check failed", "request_id", r.id, "err", err)
			return ReservedUpload{}, errReservationUnchecked
		case reserved:
			return ReservedUpload{}, errReservationRequired
		}
		return ReservedUpload{}, nil
	}
	if r.akey == nil {
		return ReservedUpload{}, errReservationForeign
	}
	u, e := s.liveReservation(ctx, r, id)
	if e != nil {
		return u, e
	}
	r.reservation = id
	return u, nil
}

// reservedPartsFit checks a Complete's parts against its reservation
// before it is sent: each part the document names must be at the store
// with the ETag it names (else S3's InvalidPart, which the store would
// answer too), and their sizes must add up to the reservation's exact size
// or at most its maximum. The store completes only parts whose ETags are
// those, so the sizes checked are the sizes it publishes. (The pinned
// SeaweedFS may list a part number uploaded twice twice, each with its
// ETag: the one named is the one completed.)
func (s *Server) reservedPartsFit(r *request, u ReservedUpload, uploadID string, doc []byte) *apiError {
	var d struct {
		Parts []struct {
			PartNumber int
			ETag       string
		} `xml:"Part"`
	}
	if err := xml.Unmarshal(doc, &d); err != nil {
		return errMalformedXML
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	parts, err := s.store.Parts(ctx, r.bucket, r.key, uploadID)
	switch {
	case errors.Is(err, store.ErrNoSuchUpload):
		return errNoSuchUpload
	case err != nil:
		s.deps.Log.Warn("listing a reserved upload's parts failed", "request_id", r.id, "err", err)
		return errStoreUnreached
	}
	var total int64
	for _, p := range d.Parts {
		found := false
		for _, at := range parts[p.PartNumber] {
			if store.TrimETag(p.ETag) == at.ETag {
				total, found = total+at.Size, true
				break
			}
		}
		if !found {
			return errInvalidPart
		}
	}
	return u.fits(total)
}
