package sigv4

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The examples of AWS's S3 SigV4 documentation (sig-v4-header-based-auth,
// sigv4-query-string-auth, sigv4-streaming).

func exampleGET() *Request {
	return &Request{
		Method:  "GET",
		Host:    "examplebucket.s3.amazonaws.com",
		RawPath: "/test.txt",
		Headers: []HeaderField{
			{"Host", "examplebucket.s3.amazonaws.com"},
			{"Authorization", "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"},
			{"Range", "bytes=0-9"},
			{"x-amz-content-sha256", EmptySHA256},
			{"x-amz-date", "20130524T000000Z"},
		},
	}
}

const examplePUTBody = "Welcome to Amazon S3."

func examplePUT() *Request {
	return &Request{
		Method:  "PUT",
		Host:    "examplebucket.s3.amazonaws.com",
		RawPath: "/test$file.text",
		Headers: []HeaderField{
			{"Host", "examplebucket.s3.amazonaws.com"},
			{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
			{"Authorization", "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"},
			{"x-amz-date", "20130524T000000Z"},
			{"x-amz-storage-class", "REDUCED_REDUNDANCY"},
			{"x-amz-content-sha256", "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"},
			{"Content-Length", "21"},
		},
	}
}

const examplePresignQuery = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"

func examplePresigned() *Request {
	return &Request{
		Method:   "GET",
		Host:     "examplebucket.s3.amazonaws.com",
		RawPath:  "/test.txt",
		RawQuery: examplePresignQuery,
		Headers:  []HeaderField{{"Host", "examplebucket.s3.amazonaws.com"}},
	}
}

var exampleChunkSigs = []string{
	"ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
	"0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
	"b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
}

func exampleChunked() (*Request, []byte) {
	r := &Request{
		Method:  "PUT",
		Host:    "s3.amazonaws.com",
		RawPath: "/examplebucket/chunkObject.txt",
		Headers: []HeaderField{
			{"Host", "s3.amazonaws.com"},
			{"x-amz-date", "20130524T000000Z"},
			{"x-amz-storage-class", "REDUCED_REDUNDANCY"},
			{"Authorization", "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"},
			{"x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"},
			{"Content-Encoding", "aws-chunked"},
			{"x-amz-decoded-content-length", "66560"},
			{"Content-Length", "66824"},
		},
	}
	var b bytes.Buffer
	b.WriteString("10000;chunk-signature=" + exampleChunkSigs[0] + "\r\n")
	b.Write(bytes.Repeat([]byte{'a'}, 65536))
	b.WriteString("\r\n400;chunk-signature=" + exampleChunkSigs[1] + "\r\n")
	b.Write(bytes.Repeat([]byte{'a'}, 1024))
	b.WriteString("\r\n0;chunk-signature=" + exampleChunkSigs[2] + "\r\n\r\n")
	return r, b.Bytes()
}

func TestAWSExamples(t *testing.T) {
	v := testVerifier(exampleTime)
	chunkReq, chunkBody := exampleChunked()
	if len(chunkBody) != 66824 {
		t.Fatalf("chunked example body is %d bytes", len(chunkBody))
	}
	for _, tc := range []struct {
		name      string
		req       *Request
		body      []byte
		want      []byte
		presigned bool
		mode      PayloadMode
	}{
		{"GET object", exampleGET(), nil, nil, false, PayloadSHA256},
		{"PUT object", examplePUT(), []byte(examplePUTBody), []byte(examplePUTBody), false, PayloadSHA256},
		{"presigned GET", examplePresigned(), nil, nil, true, PayloadUnsigned},
		{"chunked PUT", chunkReq, chunkBody, bytes.Repeat([]byte{'a'}, 66560), false, PayloadStreamingSigned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := v.Verify(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if a.AccessKeyID != exampleAKID || a.Presigned != tc.presigned || a.Payload != tc.mode || a.Region != "us-east-1" {
				t.Fatalf("auth = %+v", a)
			}
			for _, step := range []int{1, 7, 4096, 1 << 20} {
				br, err := a.Body(bytes.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				got, err := readBody(br, step)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if !bytes.Equal(got, tc.want) {
					t.Fatalf("step %d: payload differs (%d bytes)", step, len(got))
				}
			}
		})
	}
}

// TestAWSExamplesTampered flips each signed element of the examples.
func TestAWSExamplesTampered(t *testing.T) {
	v := testVerifier(exampleTime)
	for _, tc := range []struct {
		name string
		req  *Request
		code string
	}{
		{"method", func() *Request { r := exampleGET(); r.Method = "HEAD"; return r }(), CodeSignatureDoesNotMatch},
		{"path", func() *Request { r := exampleGET(); r.RawPath = "/test.txT"; return r }(), CodeSignatureDoesNotMatch},
		{"query added", func() *Request { r := exampleGET(); r.RawQuery = "acl"; return r }(), CodeSignatureDoesNotMatch},
		{"signed header", exampleGET().set("Range", "bytes=0-10"), CodeSignatureDoesNotMatch},
		{"host", func() *Request { r := exampleGET(); r.Host = "other.s3.amazonaws.com"; return r }(), CodeSignatureDoesNotMatch},
		{"date", exampleGET().set("x-amz-date", "20130524T000001Z"), CodeSignatureDoesNotMatch},
		{"payload hash", exampleGET().set("x-amz-content-sha256", strings.Repeat("0", 64)), CodeSignatureDoesNotMatch},
		{"unknown key", exampleGET().set("Authorization", strings.Replace(exampleGET().Headers[1].Value, exampleAKID, "AKIDUNKNOWN", 1)), CodeInvalidAccessKeyID},
		{"x-amz-date unsigned", exampleGET().set("Authorization", strings.Replace(exampleGET().Headers[1].Value, ";x-amz-date", "", 1)), CodeAccessDenied},
		{"region", exampleGET().set("Authorization", strings.Replace(exampleGET().Headers[1].Value, "us-east-1", "eu-west-1", 1)), CodeAuthorizationHeaderMalformed},
		{"scope date", exampleGET().set("Authorization", strings.Replace(exampleGET().Headers[1].Value, "/20130524/", "/20130525/", 1)), CodeAuthorizationHeaderMalformed},
		{"service", exampleGET().set("Authorization", strings.Replace(exampleGET().Headers[1].Value, "/s3/", "/ec2/", 1)), CodeAuthorizationHeaderMalformed},
		{"terminator", exampleGET().set("Authorization", strings.Replace(exampleGET().Headers[1].Value, "aws4_request", "aws5_request", 1)), CodeAuthorizationHeaderMalformed},
		{"no date", exampleGET().del("x-amz-date"), CodeAccessDenied},
		{"no content sha", exampleGET().del("x-amz-content-sha256"), CodeInvalidRequest},
		{"PUT storage class", examplePUT().set("x-amz-storage-class", "STANDARD"), CodeSignatureDoesNotMatch},
		{"presigned signature", func() *Request {
			r := examplePresigned()
			r.RawQuery = strings.Replace(r.RawQuery, "aeeed9bb", "aeeed9bc", 1)
			return r
		}(), CodeSignatureDoesNotMatch},
		{"presigned expires", func() *Request {
			r := examplePresigned()
			r.RawQuery = strings.Replace(r.RawQuery, "X-Amz-Expires=86400", "X-Amz-Expires=86401", 1)
			return r
		}(), CodeSignatureDoesNotMatch},
		{"presigned extra param", func() *Request { r := examplePresigned(); r.RawQuery += "&x-id=GetObject"; return r }(), CodeSignatureDoesNotMatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(tc.req)
			e := wantCode(t, err, tc.code)
			if tc.code == CodeSignatureDoesNotMatch && (e.Field("StringToSign") == "" || e.Field("CanonicalRequest") == "" || e.Field("SignatureProvided") == "" || e.Field("AWSAccessKeyId") != exampleAKID) {
				t.Fatalf("missing fields: %+v", e.Fields)
			}
			if strings.Contains(e.Error(), exampleSecret) {
				t.Fatal("secret in error")
			}
			for _, f := range e.Fields {
				if strings.Contains(f.Value, exampleSecret) {
					t.Fatal("secret in error field")
				}
			}
		})
	}
}

func TestAWSExampleCanonicalRequest(t *testing.T) {
	// A wrong signature exposes our canonical request; it must be the
	// documented one.
	r := exampleGET()
	r.set("Authorization", strings.Replace(r.Headers[1].Value, "f0e8", "f0e9", 1))
	_, err := testVerifier(exampleTime).Verify(r)
	e := wantCode(t, err, CodeSignatureDoesNotMatch)
	want := "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\nx-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\nx-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	if got := e.Field("CanonicalRequest"); got != want {
		t.Fatalf("canonical request:\n%s\nwant:\n%s", got, want)
	}
	wantSTS := "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
	if got := e.Field("StringToSign"); got != wantSTS {
		t.Fatalf("string to sign:\n%s\nwant:\n%s", got, wantSTS)
	}
}

func TestAWSExampleChunkedTampered(t *testing.T) {
	v := testVerifier(exampleTime)
	req, body := exampleChunked()
	a, err := v.Verify(req)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte {
		b := bytes.Clone(body)
		b[i] ^= 1
		return b
	}
	sigAt := func(n int) int { return bytes.Index(body, []byte(exampleChunkSigs[n])) }
	for _, tc := range []struct {
		name string
		body []byte
		code string
	}{
		{"first data byte", flip(88), CodeSignatureDoesNotMatch},
		{"last data byte", flip(len(body) - 86 - 3), CodeSignatureDoesNotMatch},
		{"chunk signature 1", flip(sigAt(0) + 5), CodeSignatureDoesNotMatch},
		{"chunk signature 2", flip(sigAt(1)), CodeSignatureDoesNotMatch},
		{"final chunk signature", flip(sigAt(2) + 63), CodeSignatureDoesNotMatch},
		{"truncated", body[:len(body)-100], CodeIncompleteBody},
		{"truncated before final chunk", body[:65626+1112], CodeIncompleteBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br, _ := a.Body(bytes.NewReader(tc.body))
			got, err := readBody(br, 1)
			wantCode(t, err, tc.code)
			if len(got) >= 66560 {
				t.Fatalf("yielded %d bytes before the error", len(got))
			}
			// A second Read repeats the error.
			if _, err2 := br.Read(make([]byte, 1)); err2 != err {
				t.Fatalf("error not sticky: %v", err2)
			}
		})
	}
}

// Each chunk signature chains the previous one: two chunks, each signed
// correctly, sent in swapped order fail at the first, before any byte of it is
// yielded whole. So does a chunk repeated in place of another.
func TestAWSExampleChunksSwapped(t *testing.T) {
	v := testVerifier(exampleTime)
	req, body := exampleChunked()
	a, err := v.Verify(req)
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(n int, size int) []byte {
		return []byte(fmt.Sprintf("%x;chunk-signature=%s\r\n%s\r\n", size, exampleChunkSigs[n], bytes.Repeat([]byte{'a'}, size)))
	}
	final := []byte("0;chunk-signature=" + exampleChunkSigs[2] + "\r\n\r\n")
	inOrder := slices.Concat(chunk(0, 65536), chunk(1, 1024), final)
	if !bytes.Equal(inOrder, body) {
		t.Fatal("the chunk builder does not rebuild the example")
	}
	// The untouched body verifies, so a failure below is the order's.
	br, _ := a.Body(bytes.NewReader(inOrder))
	if got, err := readBody(br, 4096); err != nil || len(got) != 66560 {
		t.Fatalf("the example in order: %d bytes, %v", len(got), err)
	}
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"data chunks swapped", slices.Concat(chunk(1, 1024), chunk(0, 65536), final)},
		{"second chunk replayed first", slices.Concat(chunk(1, 1024), chunk(1, 1024), final)},
		{"final chunk before the second", slices.Concat(chunk(0, 65536), final, chunk(1, 1024))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := v.Verify(req)
			if err != nil {
				t.Fatal(err)
			}
			br, _ := a.Body(bytes.NewReader(tc.body))
			got, err := readBody(br, 1)
			if err == nil {
				t.Fatalf("a reordered body verified (%d bytes)", len(got))
			}
			if tc.name != "final chunk before the second" {
				wantCode(t, err, CodeSignatureDoesNotMatch)
			}
			// The verifier streams a chunk's bytes and withholds its last
			// until the signature is checked: the error comes at the first
			// chunk, never after it was yielded whole.
			if tc.name == "data chunks swapped" && len(got) >= 1024 {
				t.Fatalf("yielded the whole first chunk (%d bytes) though its signature does not match", len(got))
			}
			if len(got) >= 66560 {
				t.Fatalf("yielded the whole body (%d bytes) before the error", len(got))
			}
		})
	}
}
