// Package reservations is the client side of fencegate's upload
// reservations (docs/RESERVATIONS.md): the reservation as the API and the
// command line print it, and what a reservation hands to the client that
// uploads: the presigned PUT URL, the browser form, the presigned
// CreateMultipartUpload. An application imports it; it carries no server.
package reservations

import (
	"encoding/base64"
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
	// For a live reservation: the browser form that uploads under it.
	Post *PostForm `json:"post,omitempty"`
	// For a live reservation that names no checksum: a presigned
	// CreateMultipartUpload (POST ?uploads) of its key that binds the upload
	// to it. Its parts and its Complete are signed by the reserving key.
	MultipartCreateURL string `json:"multipart_create_url,omitempty"`
}

// PostForm is a browser-form upload (S3's POST Object) under a
// reservation: a multipart/form-data POST to URL with Fields, in any order,
// before the file part (named "file"). Its policy, signed like the PUT URL,
// pins the bucket, the key, the reservation (Param as a field), the size
// (content-length-range: [size, size], or [0, max_size]) and the checksum
// the reservation names (its x-amz-checksum-<algorithm> field); a form may
// add Content-Type (pinned when the reservation names one) and nothing else.
type PostForm struct {
	URL    string            `json:"url"`
	Fields map[string]string `json:"fields"`
}

// Presign fills r's presigned PUT (PresignPut) and browser form
// (PresignPost).
func Presign(r *Reservation, endpoint, region, secret string, now time.Time) error {
	if err := PresignPut(r, endpoint, region, secret, now); err != nil {
		return err
	}
	if err := PresignMultipartCreate(r, endpoint, region, secret, now); err != nil {
		return err
	}
	return PresignPost(r, endpoint, region, secret, now)
}

// PresignMultipartCreate fills r.MultipartCreateURL for a live reservation
// that names no checksum (a multipart upload cannot be verified against
// one): a CreateMultipartUpload of its key carrying Param, signed as the PUT
// URL is, valid until the reservation expires.
func PresignMultipartCreate(r *Reservation, endpoint, region, secret string, now time.Time) error {
	if r.State != Reserved {
		return nil
	}
	if header, _ := r.ChecksumHeader(); header != "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return fmt.Errorf("endpoint %q: want scheme://host[:port]", endpoint)
	}
	ttl := r.ExpiresAt.Sub(now).Round(time.Second)
	ttl = min(max(ttl, time.Second), 7*24*time.Hour)
	p := sigv4.Presign{Method: "POST", Host: u.Host,
		Path:  string(sigv4.AppendEscapedPath([]byte("/"+r.Bucket+"/"), r.Key)),
		Query: map[string]string{"uploads": "", Param: r.ID}}
	r.MultipartCreateURL = strings.TrimRight(endpoint, "/") + p.Path + "?" + sigv4.PresignQuery(p, r.AccessKeyID, secret, region, now, ttl)
	return nil
}

// PresignPost fills r.Post for a live reservation: the form's URL (the
// bucket at endpoint, path-style) and fields, its policy expiring with the
// reservation and signed with the reservation's own access key (secret is
// its secret) for region. The gateway admits the form only as a write under
// this reservation.
func PresignPost(r *Reservation, endpoint, region, secret string, now time.Time) error {
	if r.State != Reserved {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return fmt.Errorf("endpoint %q: want scheme://host[:port]", endpoint)
	}
	now = now.UTC()
	date, amzDate := now.Format("20060102"), sigv4.AmzDate(now)
	credential := r.AccessKeyID + "/" + date + "/" + region + "/s3/aws4_request"
	fields := map[string]string{"key": r.Key, Param: r.ID,
		"x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-credential": credential, "x-amz-date": amzDate}
	conditions := []any{
		map[string]string{"bucket": r.Bucket},
		[]string{"eq", "$key", r.Key},
		map[string]string{Param: r.ID},
		map[string]string{"x-amz-algorithm": "AWS4-HMAC-SHA256"},
		map[string]string{"x-amz-credential": credential},
		map[string]string{"x-amz-date": amzDate},
	}
	switch {
	case r.ExactSize != nil:
		conditions = append(conditions, []any{"content-length-range", *r.ExactSize, *r.ExactSize})
	case r.MaxSize != nil:
		conditions = append(conditions, []any{"content-length-range", 0, *r.MaxSize})
	}
	if header, value := r.ChecksumHeader(); header != "" {
		fields[header] = value
		conditions = append(conditions, map[string]string{header: value})
	}
	if r.ContentType != "" {
		fields["Content-Type"] = r.ContentType
		conditions = append(conditions, map[string]string{"content-type": r.ContentType})
	} else {
		conditions = append(conditions, []string{"starts-with", "$Content-Type", ""})
	}
	doc, err := json.Marshal(map[string]any{"expiration": r.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z"), "conditions": conditions})
	if err != nil {
		return err
	}
	policy := base64.StdEncoding.EncodeToString(doc)
	fields["policy"] = policy
	fields["x-amz-signature"] = sigv4.PostPolicySignature(policy, secret, date, region)
	r.Post = &PostForm{URL: strings.TrimRight(endpoint, "/") + "/" + r.Bucket, Fields: fields}
	return nil
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
