package sigv4

import (
	"bytes"
	"flag"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
)

const otherAKID = "AKIAOTHEREXAMPLE0000"

func FuzzParseAuthorization(f *testing.F) {
	f.Add(exampleGET().Headers[1].Value)
	f.Add("AWS4-HMAC-SHA256 Credential=A/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + strings.Repeat("0", 64))
	f.Add("AWS AKID:sig")
	f.Add("AWS4-HMAC-SHA256 Credential=,,,=")
	// The example's signature under a second key's name: a verifier that
	// checked it with the wrong key's secret, or reported the credential's key
	// without checking, would verify it as that key.
	f.Add(strings.Replace(exampleGET().Headers[1].Value, exampleAKID, otherAKID, 1))
	v := testVerifier(exampleTime)
	v.Secrets = secrets{exampleAKID: exampleSecret, otherAKID: "a different secret"}
	var verified atomic.Int64
	f.Cleanup(func() {
		// Running the seeds (not fuzzing), the example verifies: the check
		// below is reached.
		if fl := flag.Lookup("test.fuzz"); fl != nil && fl.Value.String() == "" && verified.Load() == 0 {
			f.Error("no input verified: the check below never ran")
		}
	})
	f.Fuzz(func(t *testing.T, auth string) {
		ha, e := parseAuthorization(auth)
		if e == nil {
			parseCredential(ha.credential)
			validSignedHeaders(ha.signedHeaders)
		}
		r := exampleGET()
		r.set("Authorization", auth)
		a, err := v.Verify(r)
		if err == nil {
			verified.Add(1)
			// Only exampleSecret made a signature a fuzzer can reach, so only
			// exampleAKID may verify, and only where the credential names it.
			if a.AccessKeyID != exampleAKID {
				t.Fatalf("verified as %q", a.AccessKeyID)
			}
			if !strings.Contains(auth, "Credential="+exampleAKID+"/") {
				t.Fatalf("verified %q as %q, a key it does not name", auth, a.AccessKeyID)
			}
		}
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("untyped error %v", err)
			}
			if strings.Contains(err.Error(), exampleSecret) {
				t.Fatal("secret leaked")
			}
		}
	})
}

func FuzzParsePresignedQuery(f *testing.F) {
	f.Add(examplePresignQuery)
	f.Add("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=604801")
	f.Add("a=%zz&b=+&c&&=&X-Amz-Signature")
	f.Add("AWSAccessKeyId=x&Signature=y")
	v := testVerifier(exampleTime)
	f.Fuzz(func(t *testing.T, q string) {
		r := examplePresigned()
		r.RawQuery = q
		_, err := v.Verify(r)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("untyped error %v", err)
			}
		}
		var s scratchBuf
		c1 := appendCanonicalQuery(nil, q, "X-Amz-Signature", &s)
		c2 := appendCanonicalQuery(nil, string(c1), "", &s)
		if !bytes.Equal(c1, c2) {
			t.Fatalf("canonical query not idempotent: %q -> %q", c1, c2)
		}
		p1 := appendCanonicalURI(nil, "/"+q)
		if p2 := appendCanonicalURI(nil, string(p1)); !bytes.Equal(p1, p2) {
			t.Fatalf("canonical path not idempotent: %q -> %q", p1, p2)
		}
	})
}

// fuzzAuth builds an Auth for the decoder without a request: the fuzzer
// explores framing, not signatures (a signed mode fails at the first
// chunk signature unless the input carries the right one).
func fuzzAuth(mode uint8, rawLen int, decoded int64) *Auth {
	a := &Auth{
		ContentLength:        int64(rawLen),
		DecodedContentLength: decoded,
		amzDate:              "20130524T000000Z",
		scope:                "20130524/us-east-1/s3/aws4_request",
		trailers:             1<<ckCRC32 | 1<<ckCRC32C | 1<<ckCRC64NVME | 1<<ckSHA1 | 1<<ckSHA256,
	}
	switch mode % 3 {
	case 0:
		a.Payload = PayloadStreamingUnsignedTrailer
	case 1:
		a.Payload = PayloadStreamingSigned
		a.trailers = 0
	case 2:
		a.Payload = PayloadStreamingSignedTrailer
	}
	return a
}

func FuzzChunkedDecoder(f *testing.F) {
	_, ex := exampleChunked()
	f.Add(ex[:200], uint8(1), int64(-1), uint8(3))
	f.Add([]byte("5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n"), uint8(0), int64(5), uint8(1))
	f.Add([]byte("ffffff\r\nabc"), uint8(0), int64(-1), uint8(7))
	f.Add([]byte("0;chunk-signature="+strings.Repeat("a", 64)+"\r\nx-amz-trailer-signature:"+strings.Repeat("b", 64)+"\r\n\r\n"), uint8(2), int64(0), uint8(2))
	f.Fuzz(func(t *testing.T, wire []byte, mode uint8, decoded int64, step uint8) {
		if len(wire) > 16<<10 {
			// Big inputs add no framing states, only slow the minimizer.
			t.Skip()
		}
		for _, rawLen := range []int{len(wire), -1} {
			a := fuzzAuth(mode, rawLen, decoded)
			br, err := a.Body(iotest.HalfReader(bytes.NewReader(wire)))
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, int(step)+1)
			total := 0
			for i := 0; ; i++ {
				n, err := br.Read(buf)
				total += n
				d := br.chunked
				// Memory stays fixed whatever the input declares.
				if len(d.raw.buf) != rawBufSize || cap(d.raw.buf) != rawBufSize ||
					len(d.trailBuf) > maxTrailerBytes || len(d.trailers) > maxTrailers || cap(d.sts) > 1024 {
					t.Fatalf("decoder buffers grew: raw %d trail %d trailers %d", cap(d.raw.buf), len(d.trailBuf), len(d.trailers))
				}
				if total > len(wire) {
					t.Fatalf("yielded %d bytes from %d", total, len(wire))
				}
				if err == io.EOF {
					if decoded >= 0 && int64(total) != decoded {
						t.Fatalf("decoded %d, declared %d", total, decoded)
					}
					break
				}
				if err != nil {
					if _, ok := err.(*Error); !ok {
						t.Fatalf("untyped error %v", err)
					}
					break
				}
				if i > len(wire)+10 {
					t.Fatal("no progress")
				}
			}
		}
	})
}

// TestChunkedMemoryBounded: a huge declared chunk or length is refused or
// streamed, never allocated.
func TestChunkedMemoryBounded(t *testing.T) {
	for _, hdr := range []string{"ffffff", "1000000", "fffffffffffffffffff", "7fffffffffffffff"} {
		wire := []byte(hdr + "\r\n" + strings.Repeat("x", 100))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 10 {
			a := fuzzAuth(0, -1, 1<<62)
			br, _ := a.Body(bytes.NewReader(wire))
			_, err := readBody(br, 4096)
			if err == nil {
				t.Fatal("accepted a truncated huge chunk")
			}
		}
		runtime.ReadMemStats(&after)
		if per := (after.TotalAlloc - before.TotalAlloc) / 10; per > 32<<10 {
			t.Fatalf("chunk header %s: %d bytes allocated per decode", hdr, per)
		}
	}
}
