package sigv4

import (
	"bytes"
	"crypto/sha256"
	"io"
	"strconv"
	"testing"
	"time"
)

const benchPayload = 8 << 20

func BenchmarkVerifyHeaderWarm(b *testing.B) {
	req := newSignedRequest(b, "GET", "photos/2026/some key.jpg", "versionId=3&x-id=GetObject", nil, map[string]string{
		"Range":      "bytes=0-1023",
		"User-Agent": "aws-sdk-go-v2/1.0",
		"Accept":     "*/*",
	})
	sdkSign(b, req, EmptySHA256, oracleNow)
	r := fromHTTP(req)
	v := testVerifier(oracleNow)
	if _, err := v.Verify(r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := v.Verify(r); err != nil {
			b.Fatal(err)
		}
	}
}

// encodeUnsigned builds an aws-chunked body with 64 KiB chunks.
func encodeUnsigned(data []byte) []byte {
	var w bytes.Buffer
	for off := 0; off < len(data); off += 64 << 10 {
		end := min(off+64<<10, len(data))
		w.WriteString(strconv.FormatInt(int64(end-off), 16) + "\r\n")
		w.Write(data[off:end])
		w.WriteString("\r\n")
	}
	w.WriteString("0\r\n\r\n")
	return w.Bytes()
}

func decodeLoop(b *testing.B, a *Auth, wire []byte, n int) {
	buf := make([]byte, 256<<10)
	rd := bytes.NewReader(wire)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rd.Reset(wire)
		br, _ := a.Body(rd)
		total := 0
		for {
			m, err := br.Read(buf)
			total += m
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if total != n {
			b.Fatalf("decoded %d", total)
		}
	}
}

func BenchmarkDecodeUnsignedChunked(b *testing.B) {
	data := testPayload(benchPayload)
	wire := encodeUnsigned(data)
	a := fuzzAuth(0, len(wire), int64(len(data)))
	a.trailers = 0
	decodeLoop(b, a, wire, len(data))
}

func BenchmarkDecodeSignedChunked(b *testing.B) {
	data := testPayload(benchPayload)
	at := time.Now().UTC()
	r, wire := minioWire(b, "signed", data, "", at)
	a, err := testVerifier(at).Verify(r)
	if err != nil {
		b.Fatal(err)
	}
	decodeLoop(b, a, wire, len(data))
}

func BenchmarkSHA256Baseline(b *testing.B) {
	data := testPayload(benchPayload)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		h := sha256.New()
		for off := 0; off < len(data); off += 64 << 10 {
			h.Write(data[off:min(off+64<<10, len(data))])
		}
		h.Sum(nil)
	}
}
