package sigv4

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"
)

type sha256Hasher struct{ hash.Hash }

func (sha256Hasher) Close() {}

func crc32b64(b []byte) string {
	var s [4]byte
	binary.BigEndian.PutUint32(s[:], crc32.ChecksumIEEE(b))
	return base64.StdEncoding.EncodeToString(s[:])
}

func testPayload(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// minioWire produces the request and exact wire body minio-go sends.
// mode: "signed", "signed-trailer", "unsigned-trailer".
func minioWire(t testing.TB, mode string, data []byte, trailerValue string, at time.Time) (*Request, []byte) {
	t.Helper()
	req, err := http.NewRequest("PUT", "http://gw.example:9000/bucket/obj%20key", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Amz-Meta-X", "y")
	trailer := http.Header{}
	if mode != "signed" {
		trailer.Set("x-amz-checksum-crc32", trailerValue)
	}
	switch mode {
	case "signed", "signed-trailer":
		if len(trailer) > 0 {
			req.Trailer = trailer
		}
		req = signer.StreamingSignV4(req, exampleAKID, exampleSecret, "", "us-east-1", int64(len(data)), at, sha256Hasher{sha256.New()})
	case "unsigned-trailer":
		req.Header.Set("X-Amz-Content-Sha256", modeUnsignedTrail)
		req = signer.SignV4Trailer(*req, exampleAKID, exampleSecret, "", "us-east-1", trailer)
	}
	wire, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		// minio-go declares 0 for an empty streaming body yet sends the
		// final chunk; it never streams empty bodies in practice.
		req.ContentLength = int64(len(wire))
	}
	if int64(len(wire)) != req.ContentLength {
		t.Fatalf("wire %d bytes, Content-Length %d", len(wire), req.ContentLength)
	}
	return fromHTTP(req), wire
}

func withLength(r *Request, wire []byte) *Request {
	return r.clone().set("Content-Length", strconv.Itoa(len(wire)))
}

func TestMinioStreaming(t *testing.T) {
	now := time.Now().UTC()
	v := testVerifier(now)
	for _, mode := range []string{"signed", "signed-trailer", "unsigned-trailer"} {
		for _, n := range []int{0, 1, 100, 64 << 10, 64<<10 + 1, 200_000} {
			data := testPayload(n)
			r, wire := minioWire(t, mode, data, crc32b64(data), now)
			a, err := v.Verify(r)
			if err != nil {
				t.Fatalf("%s %d: %v", mode, n, err)
			}
			for _, step := range []int{1, 1000, 1 << 20} {
				if n > 1000 && step == 1 {
					continue
				}
				br, _ := a.Body(bytes.NewReader(wire))
				if br.DecodedLength() != int64(n) {
					t.Fatalf("DecodedLength %d", br.DecodedLength())
				}
				got, err := readBody(br, step)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%s %d step %d: %v (%d bytes)", mode, n, step, err, len(got))
				}
				tr := br.Trailers()
				if mode != "signed" && (len(tr) != 1 || tr[0].Name != "x-amz-checksum-crc32" || tr[0].Value != crc32b64(data)) {
					t.Fatalf("trailers %v", tr)
				}
			}
			// The same wire, de-chunked by HTTP without a Content-Length.
			r2 := r.clone().del("Content-Length").set("Transfer-Encoding", "chunked")
			a2, err := v.Verify(r2)
			if err != nil {
				t.Fatal(err)
			}
			br, _ := a2.Body(bytes.NewReader(wire))
			if got, err := readBody(br, 4096); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s %d TE: %v", mode, n, err)
			}
		}
	}
}

func TestMinioStreamingTampered(t *testing.T) {
	now := time.Now().UTC()
	v := testVerifier(now)
	data := testPayload(150_000)
	good := crc32b64(data)
	bad := crc32b64([]byte("other"))
	type tc struct {
		name string
		req  *Request
		wire []byte
		code string
	}
	var cases []tc
	for _, mode := range []string{"signed", "signed-trailer", "unsigned-trailer"} {
		r, wire := minioWire(t, mode, data, good, now)
		flip := func(i int) []byte { w := bytes.Clone(wire); w[i] = hexFlip(w[i]); return w }
		first := bytes.Index(wire, []byte("\r\n")) + 2
		lastData := bytes.LastIndex(wire, []byte("\r\n0")) - 1
		sigCode := CodeSignatureDoesNotMatch
		dataCode := CodeSignatureDoesNotMatch
		if mode == "unsigned-trailer" {
			dataCode = CodeBadDigest
		}
		cases = append(cases,
			tc{mode + " first byte", r, flip(first), dataCode},
			tc{mode + " last byte", r, flip(lastData), dataCode},
			tc{mode + " truncated", r, wire[:len(wire)-40], CodeIncompleteBody},
			tc{mode + " cut mid data", r, wire[:first+1000], CodeIncompleteBody},
		)
		if mode != "unsigned-trailer" {
			s := bytes.Index(wire, []byte("chunk-signature=")) + 20
			f := bytes.LastIndex(wire, []byte("chunk-signature=")) + 20
			cases = append(cases,
				tc{mode + " chunk signature", r, flip(s), sigCode},
				tc{mode + " final chunk signature", r, flip(f), sigCode},
			)
		}
		if mode == "signed" {
			// Trailing data where no trailer was announced.
			w := append(bytes.Clone(wire[:len(wire)-2]), "x-amz-checksum-crc32:"+good+"\r\n\r\n"...)
			cases = append(cases, tc{mode + " unannounced trailer", withLength(r, w), w, CodeMalformedTrailerError})
			continue
		}
		i := bytes.Index(wire, []byte(good))
		cases = append(cases,
			tc{mode + " trailer value", r, bytes.Replace(wire, []byte(good), []byte(bad), 1), map[bool]string{true: sigCode, false: CodeBadDigest}[mode == "signed-trailer"]},
			tc{mode + " trailer value byte", r, flip(i + 1), map[bool]string{true: sigCode, false: CodeBadDigest}[mode == "signed-trailer"]},
		)
		r2, wire2 := minioWire(t, mode, data, bad, now)
		cases = append(cases, tc{mode + " wrong checksum, signed", r2, wire2, CodeBadDigest})
		if mode == "signed-trailer" {
			ts := bytes.Index(wire, []byte("x-amz-trailer-signature:")) + 30
			cases = append(cases, tc{mode + " trailer signature", r, flip(ts), sigCode})
			w := bytes.Clone(wire[:bytes.Index(wire, []byte("x-amz-trailer-signature:"))])
			cases = append(cases, tc{mode + " trailer signature missing", withLength(r, w), w, CodeMalformedTrailerError})
		} else {
			// Announced but not sent.
			w := bytes.Clone(wire[:bytes.Index(wire, []byte("x-amz-checksum-crc32"))])
			w = append(w, "\r\n"...)
			cases = append(cases, tc{mode + " trailer missing", withLength(r, w), w, CodeInvalidRequest})
			// Sent but not announced.
			w = bytes.Replace(bytes.Clone(wire), []byte("x-amz-checksum-crc32:"+good), []byte("x-amz-checksum-crc32:"+good+"\r\nx-amz-checksum-sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAA="), 1)
			cases = append(cases, tc{mode + " trailer not announced", withLength(r, w), w, CodeInvalidRequest})
			w = bytes.Replace(bytes.Clone(wire), []byte(good), []byte("not-base64!"), 1)
			cases = append(cases, tc{mode + " trailer malformed", withLength(r, w), w, CodeInvalidRequest})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := v.Verify(c.req)
			if err != nil {
				t.Fatal(err)
			}
			br, _ := a.Body(bytes.NewReader(c.wire))
			got, err := readBody(br, 1)
			wantCode(t, err, c.code)
			if len(got) >= len(data) {
				t.Fatalf("yielded %d of %d bytes before the error", len(got), len(data))
			}
		})
	}
	// Seed signature: a signed header flipped.
	r, _ := minioWire(t, "signed-trailer", data, good, now)
	_, err := v.Verify(r.clone().set("X-Amz-Meta-X", "z"))
	wantCode(t, err, CodeSignatureDoesNotMatch)
	_, err = v.Verify(r.clone().set("X-Amz-Decoded-Content-Length", "1"))
	wantCode(t, err, CodeSignatureDoesNotMatch)
}

// hexFlip changes a byte, keeping a hex digit a hex digit.
func hexFlip(c byte) byte {
	switch c {
	case 'f':
		return 'e'
	case '9':
		return 'a'
	}
	if _, ok := unhex(c); ok {
		return c + 1
	}
	return c ^ 1
}
