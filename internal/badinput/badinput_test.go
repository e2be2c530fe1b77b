package badinput

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/sigv4"
)

type secrets map[string]string

func (s secrets) SecretKey(id string) (string, error) {
	if v, ok := s[id]; ok {
		return v, nil
	}
	return "", sigv4.ErrUnknownAccessKey
}

func testEnv(t *testing.T) *env {
	t.Helper()
	e, err := newEnv(Target{URL: "http://127.0.0.1:9", AccessKey: "AKIDBADINPUT", SecretKey: "secret/with+chars", Bucket: "bucket"})
	if err != nil {
		t.Fatal(err)
	}
	e.open = func(name string) (upload, error) {
		return upload{key: e.key(name), id: "upload~id+/=", etag: `"0123"`}, nil
	}
	return e
}

// parse splits a wire request into what the gateway hands sigv4, and its body.
func parse(t *testing.T, raw []byte) (*sigv4.Request, []byte) {
	t.Helper()
	head, body, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok {
		t.Fatalf("no end of headers in %q", raw)
	}
	lines := strings.Split(string(head), "\r\n")
	f := strings.Fields(lines[0])
	path, query, _ := strings.Cut(f[1], "?")
	r := &sigv4.Request{Method: f[0], RawPath: path, RawQuery: query}
	for _, l := range lines[1:] {
		name, value, _ := strings.Cut(l, ":")
		value = strings.TrimSpace(value)
		if strings.EqualFold(name, "host") {
			r.Host = value
		}
		r.Headers = append(r.Headers, sigv4.HeaderField{Name: name, Value: value})
	}
	return r, body
}

func verifier(e *env) *sigv4.Verifier {
	return &sigv4.Verifier{Secrets: secrets{e.t.AccessKey: e.t.SecretKey}, Region: e.t.Region}
}

// The corpus's signer agrees with the gateway's verifier on every form the
// controls and the bodies of the bad cases use, so a bad case is refused for
// its bad part only.
func TestSignerMatchesVerifier(t *testing.T) {
	e := testEnv(t)
	body := []byte("some body")
	for name, raw := range map[string][]byte{
		"put":             e.request("PUT", e.path(e.key("a b+c/ü~")), body),
		"query":           e.request("POST", e.path(e.key("k"))+"?uploadId=a~b%2Bc%2F%3D&x=%FF", body),
		"delete":          e.deleteObjects(deleteXML("k"), ""),
		"smuggled":        e.smuggle("s"),
		"chunked":         e.chunkedPut(e.key("c"), bytes.Repeat(body, 500), 1024, -1, nil),
		"chunked-1chunk":  e.chunkedPut(e.key("c"), body, 1024, -1, nil),
		"unsignedTrailer": e.unsignedTrailerPut(e.key("t"), body, "x-amz-checksum-crc32:"+crc32b64(body)),
		"backslash":       e.request("GET", e.path(e.key("x"))+`/..\key`, nil),
	} {
		req, b := parse(t, raw)
		auth, err := verifier(e).Verify(req)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		br, err := auth.Body(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: body: %v", name, err)
			continue
		}
		if _, err := io.ReadAll(br); err != nil {
			t.Errorf("%s: body: %v", name, err)
		}
	}
}

// The bad chunks are refused by the verifier for the reason their case names.
func TestBrokenChunksAreRefused(t *testing.T) {
	e := testEnv(t)
	for _, c := range Cases() {
		if !strings.HasPrefix(c.Name, "chunk-") {
			continue
		}
		raw, err := c.build(e)
		if err != nil {
			t.Fatal(err)
		}
		req, b := parse(t, raw)
		auth, err := verifier(e).Verify(req)
		if err != nil {
			t.Errorf("%s: headers refused: %v", c.Name, err)
			continue
		}
		br, err := auth.Body(bytes.NewReader(b))
		if err == nil {
			_, err = io.ReadAll(br)
		}
		var se *sigv4.Error
		if !errors.As(err, &se) || !accepts(c, response{status: se.Status, code: se.Code}) {
			t.Errorf("%s: %v, want %s", c.Name, err, c.Want())
		}
	}
}

// Every case builds, has a unique name and says what it accepts; only
// controls may accept a success.
func TestCasesAreWellFormed(t *testing.T) {
	e := testEnv(t)
	seen := map[string]bool{}
	for _, c := range Cases() {
		if seen[c.Name] || c.Name == "" || c.What == "" || len(c.Accept) == 0 {
			t.Errorf("case %q: duplicate or incomplete", c.Name)
		}
		seen[c.Name] = true
		for _, a := range c.Accept {
			if a.Status/100 == 2 && !c.control || a.Status >= 500 {
				t.Errorf("%s accepts %v", c.Name, a)
			}
		}
		if raw, err := c.build(e); err != nil || len(raw) == 0 {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
}

func TestErrorCode(t *testing.T) {
	for body, want := range map[string]string{
		`<?xml version="1.0" encoding="UTF-8"?>` + "\n<Error><Code>AccessDenied</Code><Message>x</Message></Error>": "AccessDenied",
		"<Error><Code>BadRequest</Code></Error>\n": "BadRequest",
		"Error when parsing request":               "",
		"<Other><Code>X</Code></Other>":            "",
	} {
		if got, _ := errorCode([]byte(body)); got != want {
			t.Errorf("%q: %q, want %q", body, got, want)
		}
	}
}

// The corpus's signed forms pass the gateway's policy check, so a form case
// is refused for its bad part only.
func TestSignedFormMatchesVerifier(t *testing.T) {
	e := testEnv(t)
	raw := e.form(e.key("f"), true, []hdr{{"x-amz-meta-a", "1"}}, []byte("file"), 0)
	_, body := parse(t, raw)
	mr := multipart.NewReader(bytes.NewReader(body), formBoundary)
	req := &sigv4.PostRequest{Bucket: e.t.Bucket}
	for {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatal(err)
		}
		if p.FormName() == "file" {
			req.Filename = p.FileName()
			break
		}
		v, _ := io.ReadAll(p)
		req.Fields = append(req.Fields, sigv4.HeaderField{Name: p.FormName(), Value: string(v)})
	}
	post, err := verifier(e).VerifyPost(req)
	if err != nil {
		t.Fatal(err)
	}
	if post.Key != e.key("f") {
		t.Fatalf("key %q", post.Key)
	}
}
