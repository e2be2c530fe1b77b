package conformance

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/minio/crc64nvme"

	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/meta"
)

func crc32cBase64(b []byte) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))))
}

func crc64nvmeBase64(b []byte) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint64(nil, crc64nvme.Checksum(b)))
}

// reservedCRC is one of the CRC checksums a reservation may name.
type reservedCRC struct {
	alg   string // as S3 names it: crc32c, crc64nvme
	sdk   types.ChecksumAlgorithm
	sum   func([]byte) string
	other string // another algorithm's header, for a PUT declaring it instead
}

var reservedCRCs = []reservedCRC{
	{alg: "crc32c", sdk: types.ChecksumAlgorithmCrc32c, sum: crc32cBase64, other: "x-amz-checksum-crc64nvme"},
	{alg: "crc64nvme", sdk: types.ChecksumAlgorithmCrc64nvme, sum: crc64nvmeBase64, other: "x-amz-checksum-crc32c"},
}

func (c reservedCRC) header() string { return "x-amz-checksum-" + c.alg }

// request is a reservation of key for body's size and checksum.
func (c reservedCRC) request(key string, body []byte) meta.ReservationRequest {
	q := meta.ReservationRequest{Key: key, ExactSize: ptr(int64(len(body)))}
	switch c.alg {
	case "crc32c":
		q.CRC32C = c.sum(body)
	case "crc64nvme":
		q.CRC64NVME = c.sum(body)
	}
	return q
}

// committedChecksum is the checksum the reservation's committed event records.
func (k *reservationKit) committedChecksum(t *testing.T, id string) string {
	t.Helper()
	var sum *string
	if err := k.g.Keys.Pool.QueryRow(context.Background(), `SELECT checksum FROM reservation_events
		WHERE reservation_id = $1 AND event = 'reservation.committed'`, id).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum == nil {
		return ""
	}
	return *sum
}

// refusedUntouched checks a refused write under reservation id at key left
// nothing: no publication, no bytes at the store, the reservation live.
func (k *reservationKit) refusedUntouched(t *testing.T, key, id string) {
	t.Helper()
	if n := k.published(t, key); n != 0 {
		t.Fatalf("%d publications, want none", n)
	}
	if k.atStore(t, key) {
		t.Fatal("bytes at the store")
	}
	if st := k.state(t, id).State; st != meta.ReservationReserved {
		t.Fatalf("reservation %s, want still reserved", st)
	}
}

// TestReservationCRCChecksums: a reservation naming a CRC32C or a CRC64NVME
// pins it in its presigned URL (a signed x-amz-checksum-<alg> header); the
// PUT with the right body commits and its event records the checksum; a
// body that is not it is refused 400 BadDigest on the stream (spooled or
// streamed), publishing nothing; a PUT under the reservation declaring
// another algorithm, none, or another value of it is refused before a
// request reaches the store; and complete of bytes uploaded around the
// gateway compares the store's checksum of that algorithm.
func TestReservationCRCChecksums(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	streamed := newReservationKit(t, gatewayOptions{Stream: true})
	ctx := context.Background()
	body := []byte("hello")
	for _, c := range reservedCRCs {
		t.Run(c.alg, func(t *testing.T) {
			r := k.reserve(t, c.request(c.alg+"/ok", body))
			if len(r.PutHeaders) != 1 || r.PutHeaders[c.header()] != c.sum(body) {
				t.Fatalf("put_headers %v, want %s only", r.PutHeaders, c.header())
			}
			u, err := url.Parse(r.PutURL)
			if err != nil {
				t.Fatal(err)
			}
			if signed := u.Query().Get("X-Amz-SignedHeaders"); !strings.Contains(signed, c.header()) {
				t.Fatalf("signed headers %q, want %s among them", signed, c.header())
			}
			if res := putURL(r.PutURL, body, r.PutHeaders); res.Status != 200 {
				t.Fatalf("PUT: %d %s %v", res.Status, res.Code, res.Err)
			}
			if got := k.state(t, r.ID); got.State != meta.ReservationCommitted {
				t.Fatalf("after the PUT: %s", got.State)
			}
			if got := k.committedChecksum(t, r.ID); got != c.alg+":"+c.sum(body) {
				t.Fatalf("committed event's checksum %q, want %s:%s", got, c.alg, c.sum(body))
			}
			// The store keeps the checksum the PUT went with.
			h, err := k.g.Store.S3Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: &k.bucket, Key: aws.String(c.alg + "/ok"),
				ChecksumMode: types.ChecksumModeEnabled})
			if err != nil {
				t.Fatal(err)
			}
			if aws.ToString(map[string]*string{"crc32c": h.ChecksumCRC32C, "crc64nvme": h.ChecksumCRC64NVME}[c.alg]) != c.sum(body) {
				t.Fatalf("the store's HEAD: crc32c %q crc64nvme %q", aws.ToString(h.ChecksumCRC32C), aws.ToString(h.ChecksumCRC64NVME))
			}
			if v, err := k.client().Get(ctx, r.ID); err != nil || (c.alg == "crc32c" && v.CRC32C != c.sum(body)) ||
				(c.alg == "crc64nvme" && v.CRC64NVME != c.sum(body)) {
				t.Fatalf("the reservation as the API prints it: %v %+v", err, v)
			}

			// The header is the reserved checksum, the body another's: the
			// stream's verification refuses it.
			for _, kit := range []*reservationKit{k, streamed} {
				bad := kit.reserve(t, c.request(c.alg+"/bad", body))
				if res := putURL(bad.PutURL, []byte("jello"), bad.PutHeaders); res.Status != 400 || res.Code != "BadDigest" {
					t.Fatalf("another body: %d %s (%v), want 400 BadDigest", res.Status, res.Code, res.Err)
				}
				kit.refusedUntouched(t, c.alg+"/bad", bad.ID)
			}

			// Under the reservation, signed by its key, with another
			// algorithm's header, none, or another value: refused at
			// admission, nothing sent to the store.
			pinned := k.reserve(t, c.request(c.alg+"/pinned", body))
			path := "/" + k.bucket + "/" + c.alg + "/pinned?" + reservations.Param + "=" + pinned.ID
			cases := map[string]map[string]string{
				"another algorithm": {c.other: map[string]func([]byte) string{
					"x-amz-checksum-crc32c": crc32cBase64, "x-amz-checksum-crc64nvme": crc64nvmeBase64}[c.other](body)},
				"crc32":         {"x-amz-checksum-crc32": crc32Of(body)},
				"sha256":        {"x-amz-checksum-sha256": sha256Base64(body)},
				"none":          nil,
				"another value": {c.header(): c.sum([]byte("jello"))},
			}
			for name, hdr := range cases {
				before := k.g.StoreRequests.Load()
				if res := doRaw(k.g.Endpoint, "PUT", path, body, hdr); res.Status != 400 || res.Code != "BadDigest" {
					t.Fatalf("%s: %d %s (%v), want 400 BadDigest", name, res.Status, res.Code, res.Err)
				}
				if n := k.g.StoreRequests.Load() - before; n != 0 {
					t.Fatalf("%s: %d requests reached the store, want none", name, n)
				}
				k.refusedUntouched(t, c.alg+"/pinned", pinned.ID)
			}
			// The presigned URL without its signed header is refused too.
			before := k.g.StoreRequests.Load()
			if res := putURL(pinned.PutURL, body, nil); res.Status/100 != 4 {
				t.Fatalf("the URL without its checksum header: %d %s, want a 4xx", res.Status, res.Code)
			}
			if n := k.g.StoreRequests.Load() - before; n != 0 {
				t.Fatalf("the URL without its checksum header: %d requests reached the store", n)
			}
			k.refusedUntouched(t, c.alg+"/pinned", pinned.ID)

			// Complete of bytes uploaded around the gateway: the store's
			// checksum of the algorithm is compared.
			around := k.reserve(t, c.request(c.alg+"/around", body))
			k.putAroundWith(t, c.alg+"/around", body, c.sdk)
			done, err := k.client().Complete(ctx, around.ID)
			if err != nil || done.State != reservations.Committed {
				t.Fatalf("complete: %v %+v", err, done)
			}
			if got := k.committedChecksum(t, around.ID); got != c.alg+":"+c.sum(body) {
				t.Fatalf("completed event's checksum %q, want %s:%s", got, c.alg, c.sum(body))
			}
			for name, up := range map[string]struct {
				body []byte
				alg  types.ChecksumAlgorithm
			}{"other bytes": {[]byte("jello"), c.sdk}, "another algorithm": {body, types.ChecksumAlgorithmSha256}} {
				key := c.alg + "/around-" + strings.ReplaceAll(name, " ", "-")
				wrong := k.reserve(t, c.request(key, body))
				k.putAroundWith(t, key, up.body, up.alg)
				if _, err := k.client().Complete(ctx, wrong.ID); !errors.Is(err, &reservations.APIError{Code: "BadDigest"}) {
					t.Fatalf("complete of %s: %v, want 400 BadDigest", name, err)
				}
				if st := k.state(t, wrong.ID).State; st != meta.ReservationReserved {
					t.Fatalf("after a refused complete: %s", st)
				}
			}
		})
	}
}

// putAroundWith writes body at key straight to the store with a checksum of alg.
func (k *reservationKit) putAroundWith(t *testing.T, key string, body []byte, alg types.ChecksumAlgorithm) {
	t.Helper()
	if _, err := k.g.Store.S3Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &k.bucket, Key: aws.String(key),
		Body: bytes.NewReader(body), ChecksumAlgorithm: alg}); err != nil {
		t.Fatal(err)
	}
}

// TestReservationChecksumValidation: the API takes at most one expected
// checksum, each of its algorithm's length, else 400 InvalidRequest and
// nothing is reserved.
func TestReservationChecksumValidation(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	ctx := context.Background()
	body := []byte("hello")
	c := k.client()
	for name, q := range map[string]reservations.CreateRequest{
		"crc32c of 8 bytes":    {CRC32C: crc64nvmeBase64(body)},
		"crc64nvme of 4 bytes": {CRC64NVME: crc32cBase64(body)},
		"crc32c not base64":    {CRC32C: "not base64!"},
		"two checksums":        {CRC32C: crc32cBase64(body), CRC64NVME: crc64nvmeBase64(body)},
		"sha256 and crc32c":    {SHA256: sha256Base64(body), CRC32C: crc32cBase64(body)},
	} {
		q.Bucket, q.Key = k.bucket, "v/"+strings.ReplaceAll(name, " ", "-")
		if _, err := c.Create(ctx, q); !errors.Is(err, reservations.ErrBadRequest) {
			t.Fatalf("%s: %v, want 400 InvalidRequest", name, err)
		}
		if _, ok, _ := k.rs.Live(ctx, k.bucket, q.Key); ok {
			t.Fatalf("%s: a refused create reserved the key", name)
		}
	}
	r, err := c.Create(ctx, reservations.CreateRequest{Bucket: k.bucket, Key: "v/ok", CRC64NVME: crc64nvmeBase64(body)})
	if err != nil || r.CRC64NVME != crc64nvmeBase64(body) || r.PutHeaders["x-amz-checksum-crc64nvme"] != r.CRC64NVME {
		t.Fatalf("create with a CRC64NVME: %v %+v", err, r)
	}
}

// TestReservationSDKPutCRC32C: aws-sdk-go-v2's PutObject with
// ChecksumAlgorithm CRC32C, signed by the reserving key with the
// reservation's parameter added to its query, commits the reservation.
func TestReservationSDKPutCRC32C(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	body := []byte("hello from the sdk")
	c := reservedCRCs[0]
	r := k.reserve(t, c.request("sdk/crc32c", body))
	out, err := k.g.Endpoint.S3Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &k.bucket,
		Key: aws.String("sdk/crc32c"), Body: bytes.NewReader(body), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c},
		withReservationParam(r.ID))
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(out.ChecksumCRC32C); got != c.sum(body) {
		t.Fatalf("the answer's CRC32C %q, want %s", got, c.sum(body))
	}
	if got := k.state(t, r.ID); got.State != meta.ReservationCommitted || got.ETag != trimQuotes(aws.ToString(out.ETag)) {
		t.Fatalf("after the SDK's PUT: %+v", got)
	}
	if got := k.committedChecksum(t, r.ID); got != "crc32c:"+c.sum(body) {
		t.Fatalf("committed event's checksum %q", got)
	}
}

// TestReservationsCommandCRC64NVME: `fencegate reservations create
// --crc64nvme` prints the reservation with the checksum and the header its
// URL signs, and a PUT of the URL with it commits; two checksums exit 1
// and reserve nothing.
func TestReservationsCommandCRC64NVME(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	body := []byte("hello")
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(fencegateBinary(t), append([]string{"reservations", "create", "--bucket", k.bucket, "--size", "5", "--json"}, args...)...)
		cmd.Env = append(os.Environ(), "FENCEGATE_ENDPOINT="+k.g.URL, "AWS_ACCESS_KEY_ID="+k.g.AccessKey,
			"AWS_SECRET_ACCESS_KEY="+k.g.SecretKey, "DATABASE_URL="+testenv.DatabaseURL(t))
		return cmd.CombinedOutput()
	}
	out, err := run("--key", "cli/crc64nvme", "--crc64nvme", crc64nvmeBase64(body))
	var r reservations.Reservation
	if err != nil || json.Unmarshal(out, &r) != nil || r.CRC64NVME != crc64nvmeBase64(body) ||
		r.PutHeaders["x-amz-checksum-crc64nvme"] != r.CRC64NVME {
		t.Fatalf("create: %v %s", err, out)
	}
	if res := putURL(r.PutURL, body, r.PutHeaders); res.Status != 200 {
		t.Fatalf("PUT: %d %s", res.Status, res.Code)
	}
	if st := k.state(t, r.ID).State; st != meta.ReservationCommitted {
		t.Fatalf("after the PUT: %s", st)
	}
	out, err = run("--key", "cli/two", "--crc32c", crc32cBase64(body), "--crc64nvme", crc64nvmeBase64(body))
	if err == nil || !strings.Contains(string(out), "at most one expected checksum") {
		t.Fatalf("two checksums: %v %s", err, out)
	}
	if _, ok, _ := k.rs.Live(context.Background(), k.bucket, "cli/two"); ok {
		t.Fatal("a refused create reserved the key")
	}
}

// TestReservationChecksumTrailerRefused: aws-sdk-go-v2 sending a body it
// cannot seek over HTTPS puts its CRC32C in an aws-chunked trailer, not a
// header; under a reservation naming a CRC32C that is refused 400
// BadDigest at admission (the value is not known until the body ends),
// and nothing is published.
func TestReservationChecksumTrailerRefused(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{TLS: true})
	body := []byte("hello in a trailer")
	c := reservedCRCs[0]
	r := k.reserve(t, c.request("sdk/trailer", body))
	var sent string
	_, err := k.g.Endpoint.S3Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &k.bucket,
		Key: aws.String("sdk/trailer"), Body: struct{ io.Reader }{bytes.NewReader(body)}, ContentLength: aws.Int64(int64(len(body))),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c},
		withReservationParam(r.ID), s3.WithAPIOptions(func(st *middleware.Stack) error {
			return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("seeTrailer",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					if req, ok := in.Request.(*smithyhttp.Request); ok {
						sent = req.Header.Get("X-Amz-Trailer") + "|" + req.Header.Get(c.header())
					}
					return next.HandleFinalize(ctx, in)
				}), middleware.After)
		}))
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "BadDigest" {
		t.Fatalf("PUT with the checksum in a trailer (sent %q): %v, want 400 BadDigest", sent, err)
	}
	if sent != c.header()+"|" {
		t.Fatalf("the SDK sent trailer|header %q, want the checksum in the trailer only", sent)
	}
	k.refusedUntouched(t, "sdk/trailer", r.ID)
}

// withReservationParam adds the reservation's parameter to an SDK request's
// query before it is signed.
func withReservationParam(id string) func(*s3.Options) {
	return s3.WithAPIOptions(func(st *middleware.Stack) error {
		return st.Build.Add(middleware.BuildMiddlewareFunc("fencegateReservation",
			func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				if req, ok := in.Request.(*smithyhttp.Request); ok {
					q := req.URL.Query()
					q.Set(reservations.Param, id)
					req.URL.RawQuery = q.Encode()
				}
				return next.HandleBuild(ctx, in)
			}), middleware.After)
	})
}
