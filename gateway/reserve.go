package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

// reservationParam names the reservation a PutObject writes under: a query
// parameter of the presigned URL fencegate hands out (docs/RESERVATIONS.md),
// covered by its signature.
const reservationParam = "x-fencegate-reservation"

// ReservedUpload is what admission checks a write under a reservation against.
type ReservedUpload struct {
	ID, Bucket, Key string
	AccessKeyID     string // the key that made it: the only one that may write under it
	Live            bool   // reserved, not committed, expired or cancelled
	ExpiresAt       time.Time
	ExactSize       int64 // -1: none
	MaxSize         int64 // -1: none
	// ChecksumHeader and Checksum: the x-amz-checksum-<algorithm> header a
	// PUT under it must carry (sha256, crc32c or crc64nvme) and its base64
	// value; "" when it names none.
	ChecksumHeader, Checksum string
}

// Reservations is where reservations live (PostgreSQL, behind meta; wired in
// internal/wiring). nil: the gateway has none, and checks nothing.
type Reservations interface {
	// Reservation reads one by id; ok false when there is none.
	Reservation(ctx context.Context, id string) (u ReservedUpload, ok bool, err error)
	// Reserved reports whether bucket/key has a live reservation. It may
	// answer false for a reservation a moment old (a cache): the commit
	// refuses such a write anyway.
	Reserved(ctx context.Context, bucket, key string) (bool, error)
	// Bind records that attempt writes under reservation id, before a byte
	// of it reaches the store; false when the reservation is no longer live.
	Bind(ctx context.Context, id, attempt, bucket, key string) (bool, error)
	// BoundTo is the reservation an attempt was bound to (ok false: none).
	// A multipart upload's Create attempt names the upload.
	BoundTo(ctx context.Context, attempt string) (id string, ok bool, err error)
}

var (
	errReservationRequired = newAPIError("AccessDenied", http.StatusForbidden,
		"The key is reserved for an upload; write it with its reservation's URL.")
	errReservationForeign = newAPIError("AccessDenied", http.StatusForbidden,
		"The reservation does not belong to this key or to this access key.")
	errReservationEnded = newAPIError("AccessDenied", http.StatusForbidden,
		"The reservation has expired, been cancelled, or was already used.")
	errReservationSize = newAPIError("InvalidArgument", http.StatusBadRequest,
		"The upload's size does not match its reservation.")
	errReservationTooLarge = newAPIError("EntityTooLarge", http.StatusBadRequest,
		"Your proposed upload exceeds the maximum allowed by its reservation.")
	errReservationDigest = newAPIError("BadDigest", http.StatusBadRequest,
		"The x-amz-checksum-* you specified did not match the reservation's (missing, another algorithm, or another value).")
	errReservationUnchecked = newAPIError("ServiceUnavailable", http.StatusServiceUnavailable,
		"The gateway could not check the key's reservation. Please try again.")
)

// deferrableReservationCheck reports whether admission may let r on with
// its key's reservations unchecked (e): a PutObject carrying none, refused
// only because the database cannot be asked. Its body comes first (spooled
// and verified, or refused with the client's own error), and the check is
// made again before the write (putObject); no byte reaches the store
// before it passes, and a write without a session takes no lease anyway.
func deferrableReservationCheck(r *request, query string, e *apiError) bool {
	return r.op.Name == "PutObject" && reservationInQuery(query) == "" &&
		(e == errNoSession || e == errReservationUnchecked)
}

// admitReservation decides, at admission, whether a request may write a
// reserved key: a PutObject carrying a reservation must match it (its key,
// its access key, live, its size and checksum); any other write to a key
// with a live reservation is refused. It returns the reservation the request
// writes under ("" for none) and whether its permission is the
// reservation's, not the bucket's write grant.
func (s *Server) admitReservation(r *request, query string, declared int64) (id string, e *apiError) {
	rs := s.reservations
	if rs == nil || r.op.Level != store.LevelObject {
		return "", nil
	}
	if r.reservation != "" {
		return r.reservation, nil // a call on an upload bound to it (admitReservedUpload)
	}
	id = reservationInQuery(query)
	if id == "" && (!r.op.Publishes && r.op.Name != "CreateMultipartUpload" || r.op.Name == "DeleteObject" ||
		r.op.Name == "CompleteMultipartUpload") {
		// A Complete is checked against its upload's binding once the
		// upload is looked up (completeReservation).
		return "", nil
	}
	if err := s.leases.Writable(); err != nil {
		// No write can take its lease: refuse now, not after a lookup
		// that waits on a database this gateway cannot reach.
		return "", errNoSession
	}
	ctx, cancel := s.dbctx()
	defer cancel()
	if id == "" {
		reserved, err := rs.Reserved(ctx, r.bucket, r.key)
		if err != nil {
			s.deps.Log.Warn("reservation check failed", "request_id", r.id, "err", err)
			return "", errReservationUnchecked
		}
		if reserved {
			return "", errReservationRequired
		}
		return "", nil
	}
	if r.op.Name != "PutObject" && r.op.Name != "CreateMultipartUpload" || r.akey == nil {
		return "", errReservationForeign
	}
	u, e := s.liveReservation(ctx, r, id)
	if e != nil {
		return "", e
	}
	if r.op.Name == "CreateMultipartUpload" {
		if u.ChecksumHeader != "" {
			return "", errReservationMultipartChecksum
		}
		return id, nil // its size is checked at Complete (reservedPartsFit)
	}
	if e := u.fits(declared); e != nil {
		return "", e
	}
	if u.ChecksumHeader != "" && r.hdr.get(u.ChecksumHeader) != u.Checksum {
		// The body is verified against the header on the stream (BadDigest
		// again if it differs), so a matching header pins the bytes.
		return "", errReservationDigest
	}
	return id, nil
}

// liveReservation reads reservation id for r's write: it must be r's key's,
// made by r's access key, live and not past its expiry.
func (s *Server) liveReservation(ctx context.Context, r *request, id string) (ReservedUpload, *apiError) {
	u, ok, err := s.reservations.Reservation(ctx, id)
	switch {
	case err != nil:
		s.deps.Log.Warn("reservation read failed", "request_id", r.id, "err", err)
		return u, errReservationUnchecked
	case !ok || u.Bucket != r.bucket || u.Key != r.key || u.AccessKeyID != r.akey.ID:
		return u, errReservationForeign
	case !u.Live || !time.Now().Before(u.ExpiresAt):
		return u, errReservationEnded
	}
	return u, nil
}

// fits checks a size (at least the bytes of the upload; -1: unknown yet)
// against the reservation's exact size or maximum.
func (u *ReservedUpload) fits(n int64) *apiError {
	switch {
	case u.MaxSize >= 0 && n > u.MaxSize, u.ExactSize >= 0 && n > u.ExactSize:
		return errReservationTooLarge
	case u.ExactSize >= 0 && n != u.ExactSize:
		return errReservationSize
	}
	return nil
}

// reservationInQuery is the reservation id a query names ("" for none).
func reservationInQuery(query string) string {
	if !strings.Contains(query, reservationParam) {
		return ""
	}
	v, err := url.ParseQuery(query)
	if err != nil {
		return ""
	}
	return v.Get(reservationParam)
}

// bindReservation is the write path's one hook for reservations
// (PutObject's prepare, write.go): before a PutObject under a reservation
// sends a byte to the store, its attempt is bound to the reservation, which
// must still be live (a refusal sends nothing: the attempt ends failed); the
// commit then publishes it only as that reservation's one publication
// (meta/migrations/0012_reservations.sql). The acquire usually bound it
// already, in its own transaction (bound; lease.WriteRequest.Reservation);
// a lease handed over by a commit and a multipart upload's create are bound
// here. The parameter is not sent to the store.
func (s *Server) bindReservation(r *request, u *upstream, bound bool) *apiError {
	if r.reservation == "" {
		return nil
	}
	if bound {
		u.req.URL.RawQuery = withoutReservationParam(u.req.URL.RawQuery)
		return nil
	}
	attempt := u.req.Header.Get(store.AttemptHeader)
	if attempt == "" {
		return errInternal
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := s.reservations.Bind(ctx, r.reservation, attempt, r.bucket, r.key)
	refused := errReservationEnded
	if err != nil {
		s.deps.Log.Warn("binding a write to its reservation failed", "request_id", r.id, "err", errors.Unwrap(err))
		refused = errReservationUnchecked
	}
	if err != nil || !ok {
		if u.guard != nil {
			return withClose(refused) // the streamed body is still on the wire, unread
		}
		return refused
	}
	u.req.URL.RawQuery = withoutReservationParam(u.req.URL.RawQuery)
	return nil
}

func withoutReservationParam(q string) string {
	if !strings.Contains(q, reservationParam) {
		return q
	}
	return withoutParam(q, reservationParam)
}

func withoutParam(raw, name string) string {
	var keep []string
	for _, part := range strings.Split(raw, "&") {
		n, _, _ := strings.Cut(part, "=")
		if dec, err := url.QueryUnescape(n); err == nil && dec == name {
			continue
		}
		keep = append(keep, part)
	}
	return strings.Join(keep, "&")
}

// refuseReservedKey refuses a write whose key admission could not see (a
// browser form names it in its body) when the key has a live reservation.
func (s *Server) refuseReservedKey(r *request) *apiError {
	if s.reservations == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reserved, err := s.reservations.Reserved(ctx, r.bucket, r.key)
	switch {
	case err != nil:
		s.deps.Log.Warn("reservation check failed", "request_id", r.id, "err", err)
		return errReservationUnchecked
	case reserved:
		return errReservationRequired
	}
	return nil
}

// admitFormReservation decides whether a browser form carrying the
// reservation field may write its key (r.key, from the form; its policy
// verified): as admitReservation for a PutObject, but with the form's
// x-amz-checksum-* field for the header (the file is verified against it as
// it is read), and its size checked once the file is read (fits).
func (s *Server) admitFormReservation(r *request, id string, post *sigv4.PostObject) (ReservedUpload, *apiError) {
	if s.reservations == nil {
		return ReservedUpload{}, errReservationForeign
	}
	if err := s.leases.Writable(); err != nil {
		return ReservedUpload{}, errNoSession
	}
	ctx, cancel := s.dbctx()
	defer cancel()
	u, e := s.liveReservation(ctx, r, id)
	if e != nil {
		return u, e
	}
	if u.ChecksumHeader != "" {
		if v, _ := post.Get(u.ChecksumHeader); strings.TrimSpace(v) != u.Checksum {
			return u, errReservationDigest
		}
	}
	return u, nil
}
