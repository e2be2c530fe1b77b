package sigv4

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// The SigV4 POST signature: HMAC-SHA256 of the base64 policy text under the
// signing key. The expected value was computed independently with Python's
// hmac/hashlib (policy "alpha", secret "beta", date "charlie", region
// "delta", service "echo").
func TestPostSignatureV4Vector(t *testing.T) {
	got := postSignature("beta", "charlie", "delta", "echo", base64.StdEncoding.EncodeToString([]byte("alpha")))
	if got != "dd31db20866393b4574324c3dadbba43f82c42e7d2713e9d4eb17fd22dade7d1" {
		t.Fatalf("signature %s", got)
	}
}

func postPolicyB64(t *testing.T, doc map[string]any) string {
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func v4Form(policy string, now time.Time, extra ...HeaderField) []HeaderField {
	date := now.Format("20060102")
	return append([]HeaderField{
		{"Policy", policy},
		{"X-Amz-Algorithm", "AWS4-HMAC-SHA256"},
		{"X-Amz-Credential", exampleAKID + "/" + date + "/us-east-1/s3/aws4_request"},
		{"X-Amz-Date", now.Format(iso8601Basic)},
		{"X-Amz-Signature", postSignature(exampleSecret, date, "us-east-1", "s3", policy)},
	}, extra...)
}

func TestVerifyPost(t *testing.T) {
	now := exampleTime
	v := testVerifier(now)
	date := now.Format("20060102")
	cred := exampleAKID + "/" + date + "/us-east-1/s3/aws4_request"
	base := []any{
		map[string]string{"bucket": "b"},
		[]any{"starts-with", "$key", "user/"},
		[]any{"StArTs-WiTh", "$Content-Type", "image/"},
		[]any{"content-length-range", 1, 100},
		map[string]string{"x-amz-algorithm": "AWS4-HMAC-SHA256"},
		map[string]string{"x-amz-credential": cred},
		map[string]string{"x-amz-date": now.Format(iso8601Basic)},
	}
	good := postPolicyB64(t, map[string]any{"expiration": now.Add(time.Hour).Format("2006-01-02T15:04:05.000Z"), "conditions": base})
	fields := v4Form(good, now, HeaderField{"KEY", "user/${filename}"}, HeaderField{"Content-Type", "image/png"}, HeaderField{"x-ignore-me", "1"})
	p, err := v.VerifyPost(&PostRequest{Bucket: "b", Fields: fields, Filename: "a.png"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Key != "user/a.png" || p.Auth.AccessKeyID != exampleAKID || p.MinLength != 1 || p.MaxLength != 100 {
		t.Fatalf("%+v", p)
	}
	if e := p.CheckLength(101); e == nil || e.(*Error).Code != CodeEntityTooLarge {
		t.Fatalf("101 bytes: %v", e)
	}
	if e := p.CheckLength(0); e == nil || e.(*Error).Code != CodeEntityTooSmall {
		t.Fatalf("0 bytes: %v", e)
	}

	// The older form: HMAC-SHA1 of the policy under the secret.
	v2policy := postPolicyB64(t, map[string]any{"expiration": now.Add(time.Hour).Format(time.RFC3339), "conditions": []any{
		map[string]string{"bucket": "b"}, map[string]string{"key": "k"}}})
	m := hmac.New(sha1.New, []byte(exampleSecret))
	m.Write([]byte(v2policy))
	v2sig := base64.StdEncoding.EncodeToString(m.Sum(nil))
	if _, err := v.VerifyPost(&PostRequest{Bucket: "b", Fields: []HeaderField{{"key", "k"}, {"AWSAccessKeyId", exampleAKID}, {"policy", v2policy}, {"signature", v2sig}}}); err != nil {
		t.Fatalf("V2: %v", err)
	}

	refused := []struct {
		name   string
		bucket string
		fields []HeaderField
		code   string
	}{
		{"anonymous", "b", []HeaderField{{"key", "k"}}, CodeAccessDenied},
		{"wrong bucket", "other", fields, CodeAccessDenied},
		{"key outside", "b", v4Form(good, now, HeaderField{"key", "other/x"}, HeaderField{"Content-Type", "image/png"}), CodeAccessDenied},
		{"one of the types", "b", v4Form(good, now, HeaderField{"key", "user/x"}, HeaderField{"Content-Type", "image/png,text/html"}), CodeAccessDenied},
		{"extra field", "b", v4Form(good, now, HeaderField{"key", "user/x"}, HeaderField{"Content-Type", "image/png"}, HeaderField{"x-amz-meta-a", "1"}), CodeAccessDenied},
		{"no key", "b", v4Form(good, now, HeaderField{"Content-Type", "image/png"}), CodeInvalidArgument},
		{"repeated field", "b", v4Form(good, now, HeaderField{"key", "user/x"}, HeaderField{"Key", "user/y"}), CodeInvalidArgument},
		{"bad signature", "b", append(v4Form(good, now, HeaderField{"key", "user/x"})[:4], HeaderField{"x-amz-signature", postSignature("nope", date, "us-east-1", "s3", good)}), CodeSignatureDoesNotMatch},
		{"V2 bad signature", "b", []HeaderField{{"key", "k"}, {"AWSAccessKeyId", exampleAKID}, {"policy", v2policy}, {"signature", "AAAA"}}, CodeSignatureDoesNotMatch},
		{"V2 no signature", "b", []HeaderField{{"key", "k"}, {"AWSAccessKeyId", exampleAKID}, {"policy", v2policy}}, CodeInvalidArgument},
		{"unknown key", "b", []HeaderField{{"key", "k"}, {"AWSAccessKeyId", "nobody"}, {"policy", v2policy}, {"signature", v2sig}}, CodeInvalidAccessKeyID},
	}
	for _, c := range refused {
		_, err := v.VerifyPost(&PostRequest{Bucket: c.bucket, Fields: c.fields, Filename: "a.png"})
		var e *Error
		if !errors.As(err, &e) || e.Code != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	if _, err := v.VerifyPost(&PostRequest{Bucket: "b", Fields: []HeaderField{{"key", "k"}}}); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("anonymous: %v does not wrap ErrNoCredentials", err)
	}
}

func TestParsePolicy(t *testing.T) {
	exp := `"expiration":"2030-01-01T00:00:00Z"`
	for doc, code := range map[string]string{
		`{` + exp + `,"conditions":[{"bucket":"b"}]}`: "",
		`{not json`:         CodeInvalidPolicyDocument,
		`{"conditions":[]}`: CodeInvalidPolicyDocument,
		`{"EXPIRATION":"2030-01-01T00:00:00Z","conditions":[]}`: CodeInvalidPolicyDocument,
		`{` + exp + `}`:                 CodeInvalidPolicyDocument,
		`{` + exp + `,"CONDITIONS":[]}`: CodeInvalidPolicyDocument,
		`{"expiration":"2030-01-01 00:00:00+00:00","conditions":[]}`:              CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":[{}]}`:                                         CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":[["content-length-range", 0]]}`:                CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":[["content-length-range", -1, 0]]}`:            CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":[["content-length-range", 5, 1]]}`:             CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":[["content-length-range", "1", "5"]]}`:         "",
		`{` + exp + `,"conditions":[["between", "$key", "a"]]}`:                   CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":[["eq", "key", "a"]]}`:                         CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":[["starts-with", "$key"]]}`:                    CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":"x"}`:                                          CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":[{"bucket":"b","key":"k"}]}`:                   CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":[["starts-with", "$x-amz-meta-tag", ""], 7]}`:  CodeInvalidPolicyDocument,
		`{` + exp + `,"conditions":[["starts-with", "$x-amz-meta-tag", ""]]}`:     "",
		`{"expiration":"2030-01-01T00:00:00.000Z","conditions":[["eq","$k",""]]}`: "",
	} {
		_, _, _, e := parsePolicy(base64.StdEncoding.EncodeToString([]byte(doc)))
		got := ""
		if e != nil {
			got = e.Code
		}
		if got != code {
			t.Errorf("%s: %q, want %q (%v)", doc, got, code, e)
		}
	}
}

// FuzzVerifyPost: no policy document or form makes VerifyPost panic, and
// nothing unsigned is ever accepted.
func FuzzVerifyPost(f *testing.F) {
	f.Add(`{"expiration":"2030-01-01T00:00:00Z","conditions":[{"bucket":"b"},["starts-with","$key",""],["content-length-range",0,10]]}`, "k")
	f.Add(`{"expiration":"x","conditions":[{}]}`, "${filename}")
	v := testVerifier(exampleTime)
	f.Fuzz(func(t *testing.T, doc, key string) {
		policy := base64.StdEncoding.EncodeToString([]byte(doc))
		_, _, _, _ = parsePolicy(policy)
		_, _, _, _ = parsePolicy(doc)
		if _, err := v.VerifyPost(&PostRequest{Bucket: "b", Fields: v4Form(policy, exampleTime, HeaderField{"key", key}), Filename: "f"}); err == nil {
			// Signed with the right key: fine. With a wrong one, never.
			fs := v4Form(policy, exampleTime, HeaderField{"key", key})
			fs[4].Value = postSignature("wrong", exampleTime.Format("20060102"), "us-east-1", "s3", policy)
			if _, err := v.VerifyPost(&PostRequest{Bucket: "b", Fields: fs}); err == nil {
				t.Fatal("a wrong signature was accepted")
			}
		}
	})
}

// postSignature is the SigV4 POST signature of a base64 policy, as a
// browser form carries it.
func postSignature(secret, date, region, service, policy string) string {
	key := deriveSigningKey(secret, date, region, service)
	m := hmac.New(sha256.New, key[:])
	m.Write([]byte(policy))
	return hex.EncodeToString(m.Sum(nil))
}

// PostPolicySignature signs a form VerifyPost accepts, and only the policy
// it signed: one changed condition is a signature mismatch.
func TestPostPolicySignature(t *testing.T) {
	now := exampleTime
	v := testVerifier(now)
	date := now.Format("20060102")
	cred := exampleAKID + "/" + date + "/us-east-1/s3/aws4_request"
	form := func(key string) []HeaderField {
		policy := postPolicyB64(t, map[string]any{"expiration": now.Add(time.Hour).Format("2006-01-02T15:04:05.000Z"),
			"conditions": []any{map[string]string{"bucket": "b"}, []string{"eq", "$key", key},
				map[string]string{"x-amz-algorithm": "AWS4-HMAC-SHA256"}, map[string]string{"x-amz-credential": cred},
				map[string]string{"x-amz-date": now.Format(iso8601Basic)}}})
		return []HeaderField{{"key", "k"}, {"policy", policy}, {"x-amz-algorithm", "AWS4-HMAC-SHA256"},
			{"x-amz-credential", cred}, {"x-amz-date", now.Format(iso8601Basic)},
			{"x-amz-signature", PostPolicySignature(policy, exampleSecret, date, "us-east-1")}}
	}
	if _, err := v.VerifyPost(&PostRequest{Bucket: "b", Fields: form("k")}); err != nil {
		t.Fatalf("signed form: %v", err)
	}
	f := form("k")
	f[1].Value = form("other")[1].Value // another policy under the first one's signature
	var e *Error
	if _, err := v.VerifyPost(&PostRequest{Bucket: "b", Fields: f}); !errors.As(err, &e) || e.Code != CodeSignatureDoesNotMatch {
		t.Fatalf("tampered policy: %v, want SignatureDoesNotMatch", err)
	}
}

// Every condition of a policy must hold, so two content-length-ranges both
// bound the file: their intersection, not the last one.
func TestPostLengthRangesIntersect(t *testing.T) {
	now := exampleTime
	v := testVerifier(now)
	cred := exampleAKID + "/" + now.Format("20060102") + "/us-east-1/s3/aws4_request"
	policy := postPolicyB64(t, map[string]any{"expiration": now.Add(time.Hour).Format("2006-01-02T15:04:05.000Z"),
		"conditions": []any{
			map[string]string{"bucket": "b"},
			[]any{"starts-with", "$key", ""},
			[]any{"content-length-range", 0, 10},
			[]any{"content-length-range", 5, 1000000},
			map[string]string{"x-amz-algorithm": "AWS4-HMAC-SHA256"},
			map[string]string{"x-amz-credential": cred},
			map[string]string{"x-amz-date": now.Format(iso8601Basic)},
		}})
	p, err := v.VerifyPost(&PostRequest{Bucket: "b", Fields: v4Form(policy, now, HeaderField{"key", "k"}), Filename: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if p.MinLength != 5 || p.MaxLength != 10 {
		t.Fatalf("ranges [0,10] and [5,1000000]: [%d,%d], want [5,10]", p.MinLength, p.MaxLength)
	}
	if e := p.CheckLength(1000); e == nil || e.(*Error).Code != CodeEntityTooLarge {
		t.Fatalf("1000 bytes: %v", e)
	}
}
