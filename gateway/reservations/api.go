package reservations

import (
	"encoding/json"
	"errors"
	"net/http"
)

// APIPath is where the reservation API lives on the gateway's S3 listener:
// a path no S3 bucket can have ('_' cannot start a bucket name).
const APIPath = "/_fencegate/reservations"

// CreateRequest is the body of POST APIPath.
type CreateRequest struct {
	Bucket string `json:"bucket"`
	// Key, or Prefix under which fencegate chooses the key (the prefix plus
	// the idempotency key when there is one, else plus a random name).
	Key    string `json:"key,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	// Size is the exact size; MaxSize a maximum (at most one of them).
	Size    *int64 `json:"size,omitempty"`
	MaxSize *int64 `json:"max_size,omitempty"`
	// The object's expected checksum, at most one: its SHA-256, CRC32C or
	// CRC64NVME, base64, as x-amz-checksum-sha256 / -crc32c / -crc64nvme
	// carry it.
	SHA256      string `json:"sha256,omitempty"`
	CRC32C      string `json:"crc32c,omitempty"`
	CRC64NVME   string `json:"crc64nvme,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	// Expires is how long the reservation lives, as Go writes durations
	// ("15m"; default 15m, at most 168h).
	Expires        string          `json:"expires,omitempty"`
	Account        string          `json:"account,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
}

// APIError is the API's JSON error body, and the Client's error.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

// The API's errors, by Code; errors.Is matches an *APIError to them.
var (
	ErrNotFound         = &APIError{Status: http.StatusNotFound, Code: "NoSuchReservation", Message: "The reservation does not exist."}
	ErrIdempotencyReuse = &APIError{Status: http.StatusConflict, Code: "IdempotencyKeyReused", Message: "The idempotency key was used for another request."}
	ErrQuotaExceeded    = &APIError{Status: http.StatusForbidden, Code: "QuotaExceeded", Message: "The account's quota has no room for the reservation."}
	ErrNoSuchAccount    = &APIError{Status: http.StatusNotFound, Code: "NoSuchAccount", Message: "The quota account does not exist."}
	ErrKeyReserved      = &APIError{Status: http.StatusConflict, Code: "KeyReserved", Message: "The key has a live reservation."}
	ErrNotUploaded      = &APIError{Status: http.StatusConflict, Code: "ReservationNotUploaded", Message: "The store holds no upload of the reservation at its key."}
	ErrNotLive          = &APIError{Status: http.StatusConflict, Code: "ReservationNotLive", Message: "The reservation is not live (committed, expired or cancelled)."}
	ErrAccessDenied     = &APIError{Status: http.StatusForbidden, Code: "AccessDenied", Message: "Access Denied"}
	ErrBadRequest       = &APIError{Status: http.StatusBadRequest, Code: "InvalidRequest", Message: "The request is not valid."}
)

// Is matches errors by Code.
func (e *APIError) Is(target error) bool {
	var t *APIError
	return errors.As(target, &t) && t.Code == e.Code
}

// Invalid is ErrBadRequest with its reason.
func Invalid(msg string) *APIError {
	return &APIError{Status: http.StatusBadRequest, Code: ErrBadRequest.Code, Message: msg}
}
