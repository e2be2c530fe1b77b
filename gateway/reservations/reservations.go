// Package reservations is the client side of fencegate's upload
// reservations (docs/RESERVATIONS.md): the reservation as the API and the
// command line print it, and the presigned PUT URL a reservation hands to
// the client that uploads. An application imports it; it carries no server.
package reservations

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/fencegate/fencegate/sigv4"
)

// Param is the query parameter a PUT under a reservation carries, covered
// by its presigned URL's signature.
const Param = "x-fencegate-reservation"

// States of a reservation.
const (
	Reserved  = "reserved"
	Committed = "committed"
	Expired   = "expired"
	Cancelled = "cancelled"
	Failed    = "failed"
)

// Reservation is one reservation as fencegate prints it.
type Reservation struct {
	ID          string          `json:"id"`
	Bucket      string          `json:"bucket"`
	Key         string          `json:"key"`
	AccessKeyID string          `json:"access_key_id"`
	Account     string          `json:"account,omitempty"`
	ExactSize   *int64          `json:"expected_size,omitempty"`
	MaxSize     *int64          `json:"max_size,omitempty"`
	Reserved    int64           `json:"reserved_bytes"`
	SHA256      string          `json:"sha256,omitempty"`
	CRC32C      string          `json:"crc32c,omitempty"`
	CRC64NVME   string          `json:"crc64nvme,omitempty"`
	ContentType string          `json:"content_type,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	State       string          `json:"state"`
	ExpiresAt   time.Time       `json:"expires_at"`
	CreatedAt   time.Time       `json:"created_at"`
	EndedAt     *time.Time      `json:"ended_at,omitempty"`
	// Once committed: the object's verified size and ETag, and its generation.
	Size       *int64 `json:"size,omitempty"`
	ETag       string `json:"etag,omitempty"`
	Generation *int64 `json:"generation,omitempty"`
	// For a live reservation: the presigned PUT, and the headers it must be
	// sent with (signed: the x-amz-checksum-<algorithm> of the checksum the
	// reservation names, if any).
	PutURL     string            `json:"put_url,omitempty"`
	PutHeaders map[string]string `json:"put_headers,omitempty"`
}

// PresignPut fills r.PutURL (and r.PutHeaders) for a live reservation: a PUT
// of its key at endpoint (scheme://host[:port], path-style), carrying Param,
// signed with the reservation's own access key (secret is its secret) for
// region, valid from now until the reservation expires (at most a week).
// The gateway admits it only as a write under this reservation.
func PresignPut(r *Reservation, endpoint, region, secret string, now time.Time) error {
	if r.State != Reserved {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return fmt.Errorf("endpoint %q: want scheme://host[:port]", endpoint)
	}
	ttl := r.ExpiresAt.Sub(now).Round(time.Second)
	ttl = min(max(ttl, time.Second), 7*24*time.Hour)
	p := sigv4.Presign{Method: "PUT", Host: u.Host,
		Path:  string(sigv4.AppendEscapedPath([]byte("/"+r.Bucket+"/"), r.Key)),
		Query: map[string]string{Param: r.ID}}
	if header, value := r.ChecksumHeader(); header != "" {
		p.Headers = map[string]string{header: value}
		r.PutHeaders = p.Headers
	}
	q := sigv4.PresignQuery(p, r.AccessKeyID, secret, region, now, ttl)
	r.PutURL = strings.TrimRight(endpoint, "/") + p.Path + "?" + q
	return nil
}

// ChecksumHeader is the header a PUT under r must carry, and its value: the
// x-amz-checksum-<algorithm> of the checksum r names ("" when it names none).
func (r *Reservation) ChecksumHeader() (header, value string) {
	switch {
	case r.SHA256 != "":
		return "x-amz-checksum-sha256", r.SHA256
	case r.CRC32C != "":
		return "x-amz-checksum-crc32c", r.CRC32C
	case r.CRC64NVME != "":
		return "x-amz-checksum-crc64nvme", r.CRC64NVME
	}
	return "", ""
}
