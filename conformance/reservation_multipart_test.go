package conformance

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/meta"
)

// multipartKit is a reservation kit with a key that may only reserve in
// its bucket: its API client, and its S3 endpoint.
type multipartKit struct {
	*reservationKit
	api      *reservations.Client
	reserver stack.Endpoint
}

func newMultipartKit(t *testing.T) *multipartKit {
	t.Helper()
	return newMultipartKitWith(t, gatewayOptions{})
}

// newMultipartKitWith is newMultipartKit on a gateway started with o.
func newMultipartKitWith(t *testing.T, o gatewayOptions) *multipartKit {
	t.Helper()
	k := newReservationKit(t, o)
	key, err := k.g.Keys.Create(context.Background(), "reserver", []meta.Grant{{Bucket: k.bucket, Permission: meta.PermReserve}})
	if err != nil {
		t.Fatal(err)
	}
	ep := k.g.Endpoint
	ep.AccessKey, ep.SecretKey = key.ID, key.Secret
	return &multipartKit{reservationKit: k, api: &reservations.Client{Endpoint: k.g.URL, AccessKey: key.ID, SecretKey: key.Secret}, reserver: ep}
}

func (k *multipartKit) create(t *testing.T, q reservations.CreateRequest) reservations.Reservation {
	t.Helper()
	q.Bucket = k.bucket
	r, err := k.api.Create(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// createUpload sends a reservation's presigned CreateMultipartUpload and
// returns the upload id ("" when refused), the status and the error code.
func createUpload(t *testing.T, url string) (string, int, string) {
	t.Helper()
	resp, err := http.Post(url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return xmlText(b, "UploadId"), resp.StatusCode, xmlText(b, "Code")
}

// s3Code is an SDK error's S3 code ("" for none).
func s3Code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// uploadParts uploads parts (number i+1 is parts[i]) with c and returns the
// completed-part list.
func uploadParts(t *testing.T, c *s3.Client, bucket, key, uploadID string, parts ...[]byte) []types.CompletedPart {
	t.Helper()
	var done []types.CompletedPart
	for i, p := range parts {
		out, err := c.UploadPart(context.Background(), &s3.UploadPartInput{Bucket: &bucket, Key: &key, UploadId: &uploadID,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p)})
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		done = append(done, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag})
	}
	return done
}

func complete(c *s3.Client, bucket, key, uploadID string, parts []types.CompletedPart) error {
	_, err := c.CompleteMultipartUpload(context.Background(), &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: &key,
		UploadId: &uploadID, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	return err
}

// TestReservationMultipartCommits: a reservation's multipart_create_url
// starts an upload bound to it; the reserving key, which may only reserve
// in the bucket, uploads its parts and completes it; the Complete commits
// the reservation with the object's size, once, and the gateway counts it.
func TestReservationMultipartCommits(t *testing.T) {
	k := newMultipartKit(t)
	r := k.create(t, reservations.CreateRequest{Key: "mp/big", MaxSize: ptr[int64](6 << 20)})
	if r.MultipartCreateURL == "" {
		t.Fatalf("no multipart_create_url: %+v", r)
	}
	id, status, code := createUpload(t, r.MultipartCreateURL)
	if status != 200 || id == "" {
		t.Fatalf("create: %d %s", status, code)
	}
	c := k.reserver.S3Client()
	parts := uploadParts(t, c, k.bucket, r.Key, id, bytes.Repeat([]byte("a"), 5<<20), []byte("0123456789"))
	if err := complete(c, k.bucket, r.Key, id, parts); err != nil {
		t.Fatalf("complete: %v", err)
	}
	got := k.state(t, r.ID)
	if got.State != meta.ReservationCommitted || got.Size == nil || *got.Size != 5<<20+10 {
		t.Fatalf("after the complete: %+v", got)
	}
	if n := k.published(t, r.Key); n != 1 {
		t.Fatalf("%d publications, want 1", n)
	}
	if m := metricsOf(t, k.g.Admin); m["fencegate_reservations_committed_total"] != 1 {
		t.Fatalf("fencegate_reservations_committed_total = %v, want 1", m["fencegate_reservations_committed_total"])
	}
	// The create URL again: the reservation is committed.
	if _, status, code := createUpload(t, r.MultipartCreateURL); status != 403 || code != "AccessDenied" {
		t.Fatalf("create after the commit: %d %s, want 403 AccessDenied", status, code)
	}
}

// TestReservationMultipartRefusals: a Complete whose parts add up to more
// than the reservation's size is refused before it is sent (the upload can
// then be completed with the right parts); a part over the reservation's
// maximum, a Create under another key's, a cancelled, or a checksum
// reservation, and a part of an upload bound to no reservation from the
// reserving key are refused before the store; a Complete after the
// reservation was cancelled, or by another key, is refused before the
// store; one naming a part not uploaded is InvalidPart and publishes
// nothing.
func TestReservationMultipartRefusals(t *testing.T) {
	k := newMultipartKit(t)
	c := k.reserver.S3Client()
	big := bytes.Repeat([]byte("b"), 5<<20)

	t.Run("complete_over_the_exact_size", func(t *testing.T) {
		r := k.create(t, reservations.CreateRequest{Key: "mp/exact", Size: ptr[int64](5<<20 + 5)})
		id, status, code := createUpload(t, r.MultipartCreateURL)
		if status != 200 {
			t.Fatalf("create: %d %s", status, code)
		}
		parts := uploadParts(t, c, k.bucket, r.Key, id, big, []byte("0123456789"))
		if err := complete(c, k.bucket, r.Key, id, parts); s3Code(err) != "EntityTooLarge" {
			t.Fatalf("complete: %v, want EntityTooLarge", err)
		}
		k.refusedUntouched(t, r.Key, r.ID)
		parts = uploadParts(t, c, k.bucket, r.Key, id, big, []byte("01234"))
		if err := complete(c, k.bucket, r.Key, id, parts); err != nil {
			t.Fatalf("complete with the reserved size: %v", err)
		}
		if st := k.state(t, r.ID); st.State != meta.ReservationCommitted || *st.Size != 5<<20+5 {
			t.Fatalf("after the complete: %+v", st)
		}
	})
	t.Run("complete_after_cancel", func(t *testing.T) {
		r := k.create(t, reservations.CreateRequest{Key: "mp/cancelled", MaxSize: ptr[int64](100)})
		id, status, code := createUpload(t, r.MultipartCreateURL)
		if status != 200 {
			t.Fatalf("create: %d %s", status, code)
		}
		parts := uploadParts(t, c, k.bucket, r.Key, id, []byte("hello"))
		if _, err := k.api.Cancel(context.Background(), r.ID); err != nil {
			t.Fatal(err)
		}
		before := k.g.StoreRequests.Load()
		if err := complete(c, k.bucket, r.Key, id, parts); s3Code(err) != "AccessDenied" {
			t.Fatalf("complete: %v, want AccessDenied", err)
		}
		if n := k.g.StoreRequests.Load() - before; n != 0 {
			t.Fatalf("%d requests reached the store", n)
		}
		if k.published(t, r.Key) != 0 || k.atStore(t, r.Key) {
			t.Fatal("the upload was published")
		}
		// Its key may still abort it.
		if _, err := c.AbortMultipartUpload(context.Background(), &s3.AbortMultipartUploadInput{Bucket: &k.bucket, Key: &r.Key, UploadId: &id}); err != nil {
			t.Fatalf("abort: %v", err)
		}
	})

	maxed := k.create(t, reservations.CreateRequest{Key: "mp/max", MaxSize: ptr[int64](100)})
	maxedUpload, status, code := createUpload(t, maxed.MultipartCreateURL)
	if status != 200 {
		t.Fatalf("create: %d %s", status, code)
	}
	summed := k.create(t, reservations.CreateRequest{Key: "mp/sum", SHA256: sha256Base64([]byte("hello"))})
	if summed.MultipartCreateURL != "" {
		t.Fatalf("a checksum reservation has a multipart_create_url: %+v", summed)
	}
	cancelled := k.create(t, reservations.CreateRequest{Key: "mp/gone", MaxSize: ptr[int64](100)})
	if _, err := k.api.Cancel(context.Background(), cancelled.ID); err != nil {
		t.Fatal(err)
	}
	other, err := k.g.Keys.Create(context.Background(), "other", []meta.Grant{{Bucket: "*", Permission: meta.PermWrite}})
	if err != nil {
		t.Fatal(err)
	}
	otherEP := k.g.Endpoint
	otherEP.AccessKey, otherEP.SecretKey = other.ID, other.Secret
	waitFor(t, "the gateway to know the new key", 10*time.Second, func() bool {
		return doRaw(otherEP, "GET", "/"+k.bucket+"?list-type=2", nil, nil).Code != "InvalidAccessKeyId"
	})
	free, err := k.g.Endpoint.S3Client().CreateMultipartUpload(context.Background(), &s3.CreateMultipartUploadInput{Bucket: &k.bucket, Key: aws.String("mp/free")})
	if err != nil {
		t.Fatal(err)
	}
	withParam := func(ep stack.Endpoint, key, id string) func() (int, string) {
		return func() (int, string) {
			res := doRaw(ep, "POST", "/"+k.bucket+"/"+key+"?uploads&"+reservations.Param+"="+id, nil, nil)
			return res.Status, res.Code
		}
	}
	sdk := func(f func() error) func() (int, string) {
		return func() (int, string) {
			err := f()
			if err == nil {
				return 200, ""
			}
			var re interface{ HTTPStatusCode() int }
			if errors.As(err, &re) {
				return re.HTTPStatusCode(), s3Code(err)
			}
			return 0, err.Error()
		}
	}
	cases := []struct {
		name   string
		do     func() (int, string)
		status int
		code   string
	}{
		{"part over the maximum", sdk(func() error {
			_, err := c.UploadPart(context.Background(), &s3.UploadPartInput{Bucket: &k.bucket, Key: &maxed.Key, UploadId: &maxedUpload,
				PartNumber: aws.Int32(1), Body: bytes.NewReader(bytes.Repeat([]byte("x"), 101))})
			return err
		}), 400, "EntityTooLarge"},
		{"create under another key's reservation", withParam(otherEP, maxed.Key, maxed.ID), 403, "AccessDenied"},
		{"create of another key under the reservation", withParam(k.reserver, "mp/elsewhere", maxed.ID), 403, "AccessDenied"},
		{"create under a cancelled reservation", func() (int, string) {
			_, status, code := createUpload(t, cancelled.MultipartCreateURL)
			return status, code
		}, 403, "AccessDenied"},
		{"create under a checksum reservation", withParam(k.reserver, summed.Key, summed.ID), 400, "InvalidRequest"},
		{"create without the reservation", func() (int, string) {
			res := doRaw(k.g.Endpoint, "POST", "/"+k.bucket+"/"+maxed.Key+"?uploads", nil, nil)
			return res.Status, res.Code
		}, 403, "AccessDenied"},
		{"part of an unbound upload", sdk(func() error {
			_, err := c.UploadPart(context.Background(), &s3.UploadPartInput{Bucket: &k.bucket, Key: aws.String("mp/free"), UploadId: free.UploadId,
				PartNumber: aws.Int32(1), Body: strings.NewReader("hello")})
			return err
		}), 403, "AccessDenied"},
	}
	t.Run("complete_by_another_key_or_of_a_part_not_uploaded", func(t *testing.T) {
		r := k.create(t, reservations.CreateRequest{Key: "mp/theirs", MaxSize: ptr[int64](100)})
		id, status, code := createUpload(t, r.MultipartCreateURL)
		if status != 200 {
			t.Fatalf("create: %d %s", status, code)
		}
		parts := uploadParts(t, c, k.bucket, r.Key, id, []byte("hello"))
		before := k.g.StoreRequests.Load()
		if err := complete(otherEP.S3Client(), k.bucket, r.Key, id, parts); s3Code(err) != "AccessDenied" {
			t.Fatalf("complete by another key: %v, want AccessDenied", err)
		}
		if n := k.g.StoreRequests.Load() - before; n != 0 {
			t.Fatalf("%d requests reached the store", n)
		}
		missing := append(parts, types.CompletedPart{PartNumber: aws.Int32(2), ETag: aws.String(`"00000000000000000000000000000000"`)})
		if err := complete(c, k.bucket, r.Key, id, missing); s3Code(err) != "InvalidPart" {
			t.Fatalf("complete naming a part not uploaded: %v, want InvalidPart", err)
		}
		k.refusedUntouched(t, r.Key, r.ID)
	})
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			before := k.g.StoreRequests.Load()
			status, code := tc.do()
			if status != tc.status || code != tc.code {
				t.Fatalf("%d %s, want %d %s", status, code, tc.status, tc.code)
			}
			if n := k.g.StoreRequests.Load() - before; n != 0 {
				t.Fatalf("%d requests reached the store", n)
			}
		})
	}
	for _, id := range []string{maxed.ID, summed.ID} {
		if st := k.state(t, id).State; st != meta.ReservationReserved {
			t.Fatalf("reservation %s: %s, want reserved", id, st)
		}
	}
}
