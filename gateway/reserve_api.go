package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/gateway/reservations"
)

// ReservationAPI serves the reservation API (docs/RESERVATIONS.md) on the S3
// listener, under reservations.APIPath; internal/wiring fills it from meta.
// Its errors are *reservations.APIError when they are the caller's.
type ReservationAPI interface {
	// CreateReservation's made is false for an idempotent repeat.
	CreateReservation(ctx context.Context, accessKey string, q reservations.CreateRequest) (res reservations.Reservation, made bool, err error)
	GetReservation(ctx context.Context, id string) (reservations.Reservation, error)
	ListReservations(ctx context.Context, bucket string) ([]reservations.Reservation, error)
	CancelReservation(ctx context.Context, id string) (reservations.Reservation, error)
	// CompleteReservation commits a live reservation on the bytes the store
	// holds at its key, verified (internal/wiring's complete.go); a
	// committed one is returned as it is.
	CompleteReservation(ctx context.Context, id string) (reservations.Reservation, error)
}

// The API's rows of the op table are selected by these pseudo-subresources
// of the service level: no S3 request has them, since admission sets them
// only for a path under reservations.APIPath (apiRoute).
const (
	apiCollection = "fencegate:reservations"
	apiItem       = "fencegate:reservation"
	apiComplete   = "fencegate:reservation-complete"
)

// apiRoute reports whether a path-style request path is the reservation
// API's, the reservation id it names ("" for the collection), and its row's
// pseudo-subresource (apiCollection, apiItem, or apiComplete for ID/complete).
func apiRoute(rawPath string) (id, sub string, ok bool) {
	rest, ok := strings.CutPrefix(rawPath, reservations.APIPath)
	switch {
	case !ok:
		return "", "", false
	case rest == "" || rest == "/":
		return "", apiCollection, true
	case rest[0] != '/':
		return "", "", false
	}
	id, action, nested := strings.Cut(rest[1:], "/")
	switch {
	case id == "":
		return "", "", false
	case !nested:
		return id, apiItem, true
	case action == "complete":
		return id, apiComplete, true
	}
	return "", "", false
}

// maxAPIBody bounds a create's JSON (its metadata is at most 4 KiB).
const maxAPIBody = 64 << 10

func (s *Server) reservationRequest(ctx *fasthttp.RequestCtx, r *request) *apiError {
	api, _ := s.reservations.(ReservationAPI)
	if api == nil {
		return errNotImplemented
	}
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := s.smallBody(ctx, r)
	if err != nil {
		return asAPIError(err)
	}
	var out any
	switch r.op.Name {
	case "CreateReservation":
		var q reservations.CreateRequest
		if len(body) > maxAPIBody {
			return writeJSONError(ctx, reservations.Invalid("the request body is over 64 KiB"))
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&q); err != nil {
			return writeJSONError(ctx, reservations.Invalid("the request body is not a reservation: "+err.Error()))
		}
		if !ValidBucketName(q.Bucket) || !r.akey.allowed(PermReserve, q.Bucket) {
			return writeJSONError(ctx, reservations.ErrAccessDenied)
		}
		res, made, err := api.CreateReservation(dctx, r.akey.ID, q)
		if err != nil {
			return s.apiFailure(ctx, r, err)
		}
		if made {
			s.metrics.reservationsCreated.Inc()
		}
		if err := reservations.Presign(&res, clientEndpoint(r), apiRegion(r), r.akey.Secret, time.Now()); err != nil {
			return s.apiFailure(ctx, r, err)
		}
		ctx.SetStatusCode(http.StatusCreated)
		out = res
	case "ListReservations":
		bucket := string(ctx.QueryArgs().Peek("bucket"))
		if !r.akey.allowed(PermReserve, bucket) {
			return writeJSONError(ctx, reservations.ErrAccessDenied)
		}
		all, err := api.ListReservations(dctx, bucket)
		if err != nil {
			return s.apiFailure(ctx, r, err)
		}
		out = all
	case "GetReservation", "CancelReservation", "CompleteReservation":
		res, err := api.GetReservation(dctx, r.key)
		if err == nil && res.AccessKeyID != r.akey.ID && !r.akey.allowed(PermAdmin, res.Bucket) {
			err = reservations.ErrNotFound // another key's: not told apart from none
		}
		if err == nil && r.op.Name == "CancelReservation" {
			if res, err = api.CancelReservation(dctx, r.key); err == nil {
				s.metrics.reservationsCancelled.Inc()
			}
		}
		if err == nil && r.op.Name == "CompleteReservation" && res.State != reservations.Committed {
			// A committed one (its PUT through the gateway committed it)
			// is answered as read: every repeat returns the current state.
			// Settling may wait for a writer holding the key.
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			before := res.State
			if res, err = api.CompleteReservation(cctx, r.key); err == nil && before == reservations.Reserved {
				s.metrics.reservationsCommitted.Inc()
			}
		}
		if err != nil {
			return s.apiFailure(ctx, r, err)
		}
		out = res
	default:
		return errNotImplemented
	}
	b, err := json.Marshal(out)
	if err != nil {
		return errInternal
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
	return nil
}

// apiRegion is the region the URL is signed for: the one the caller signed
// its own request for (which the gateway accepted), else us-east-1.
func apiRegion(r *request) string {
	if r.auth != nil && r.auth.Region != "" {
		return r.auth.Region
	}
	return "us-east-1"
}

func (s *Server) apiFailure(ctx *fasthttp.RequestCtx, r *request, err error) *apiError {
	var ae *reservations.APIError
	if errors.As(err, &ae) {
		return writeJSONError(ctx, ae)
	}
	// Anything but the API's own answers is its database or store failing
	// or out of reach (a timeout, a lost connection, a failover): a 503 to
	// retry, as an S3 call that cannot reach them answers.
	s.deps.Log.Warn("reservation API call failed", "request_id", r.id, "op", r.op.Name, "err", err)
	return writeJSONError(ctx, &reservations.APIError{Status: http.StatusServiceUnavailable, Code: "ServiceUnavailable",
		Message: "The gateway could not reach its database or store. Please try again."})
}

// writeJSONError answers with the API's JSON error; nil, since the answer
// is written.
func writeJSONError(ctx *fasthttp.RequestCtx, e *reservations.APIError) *apiError {
	b, _ := json.Marshal(e)
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
	return nil
}
