package gateway

import (
	"bytes"
	"encoding/base64"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestChunkEncoderFramesAndMatchesLength(t *testing.T) {
	for _, n := range []int64{0, 1, upstreamChunkSize - 1, upstreamChunkSize, upstreamChunkSize + 1, 3*upstreamChunkSize + 7} {
		payload := bytes.Repeat([]byte{'x'}, int(n))
		enc := newChunkEncoder(iotest.HalfReader(bytes.NewReader(payload)), n, "", nil)
		out, err := io.ReadAll(enc)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if int64(len(out)) != encodedLength(n, "x-amz-checksum-crc32") {
			t.Fatalf("n=%d: encoded %d bytes, encodedLength says %d", n, len(out), encodedLength(n, "x-amz-checksum-crc32"))
		}
		sum := crc32.ChecksumIEEE(payload)
		want := "0\r\nx-amz-checksum-crc32:" + base64.StdEncoding.EncodeToString([]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)}) + "\r\n\r\n"
		if !strings.HasSuffix(string(out), want) {
			t.Fatalf("n=%d: trailer %q, want suffix %q", n, out[max(0, len(out)-60):], want)
		}
	}
}

func TestChunkEncoderShortSourceNeverEnds(t *testing.T) {
	enc := newChunkEncoder(bytes.NewReader(make([]byte, 10)), 11, "", nil)
	out, err := io.ReadAll(enc)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want ErrUnexpectedEOF", err)
	}
	if bytes.Contains(out, []byte("0\r\n")) {
		t.Fatal("a short body produced a final chunk")
	}
}

func TestChunkEncoderLongSourceFails(t *testing.T) {
	enc := newChunkEncoder(bytes.NewReader(make([]byte, 12)), 11, "", nil)
	if _, err := io.ReadAll(enc); !errors.Is(err, errBodyLonger) {
		t.Fatalf("err = %v, want errBodyLonger", err)
	}
}
