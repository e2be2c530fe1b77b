package badinput

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"mime/multipart"
	"strings"
	"time"
)

// POST Object cases: a browser form carries its credentials (a signed
// policy) in its body, so what the gateway reads before verifying it, and
// what a signed form may make the store do, are attack surface of their own.

// formBoundary separates a form's parts.
const formBoundary = "badinputformboundary"

// form is a POST Object request for key: fields (after key, each named in
// the policy when signed), the policy and its signature when signed, then a
// file part; cut bytes are left off its end (a form cut short inside its
// file).
func (e *env) form(key string, signed bool, fields []hdr, file []byte, cut int) []byte {
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	_ = w.SetBoundary(formBoundary)
	_ = w.WriteField("key", key)
	for _, f := range fields {
		_ = w.WriteField(f.name, f.value)
	}
	if signed {
		s := e.signer()
		credential := s.access + "/" + s.scope()
		conds := []any{map[string]string{"bucket": e.t.Bucket}, map[string]string{"key": key},
			map[string]string{"x-amz-algorithm": algorithm}, map[string]string{"x-amz-credential": credential},
			map[string]string{"x-amz-date": s.date()}}
		for _, f := range fields {
			conds = append(conds, map[string]string{f.name: f.value})
		}
		doc, _ := json.Marshal(map[string]any{"expiration": s.now.Add(time.Hour).UTC().Format("2006-01-02T15:04:05.000Z"), "conditions": conds})
		policy := base64.StdEncoding.EncodeToString(doc)
		_ = w.WriteField("policy", policy)
		_ = w.WriteField("x-amz-algorithm", algorithm)
		_ = w.WriteField("x-amz-credential", credential)
		_ = w.WriteField("x-amz-date", s.date())
		_ = w.WriteField("x-amz-signature", hex.EncodeToString(hmacSum(s.key(), policy)))
	}
	p, _ := w.CreateFormFile("file", "f.txt")
	_, _ = p.Write(file)
	_ = w.Close()
	b := body.Bytes()[:body.Len()-cut]
	hs := []hdr{{"Host", e.addr}, {"Content-Type", "multipart/form-data; boundary=" + formBoundary}, contentLength(len(b))}
	return wire("POST", e.path(""), hs, b)
}

func formCases() []Case {
	file := []byte("a form's file")
	return []Case{
		{Name: "form-cut-in-file", What: "a signed form whose file ends without its closing boundary (its client gone while holding it)",
			method: "POST", Accept: join(answers(400, "IncompleteBody", "MalformedPOSTRequest"), answers(0)), smuggled: []string{"form-cut"},
			build: build(func(e *env) []byte { return e.form(e.key("form-cut"), true, nil, bytes.Repeat(file, 100), 600) })},
		{Name: "form-unsigned", What: "a form with neither policy nor signature", method: "POST",
			Accept: answers(403, "AccessDenied"), smuggled: []string{"form-unsigned"},
			build: build(func(e *env) []byte { return e.form(e.key("form-unsigned"), false, nil, file, 0) })},
		{Name: "form-fields-oversized", What: "70 KiB of fields before the file, unsigned (read before any policy is verified)",
			method: "POST", Accept: answers(400, "MaxPostPreDataLengthExceededError"), smuggled: []string{"form-fields"},
			build: build(func(e *env) []byte {
				return e.form(e.key("form-fields"), false, []hdr{{"x-amz-meta-pad", strings.Repeat("p", 70<<10)}}, file, 0)
			})},
		{Name: "form-metadata-too-large", What: "a signed form with 3 KiB of x-amz-meta-* (S3 allows 2 KB)", method: "POST",
			Accept: answers(400, "MetadataTooLarge"), smuggled: []string{"form-metadata"},
			build: build(func(e *env) []byte {
				return e.form(e.key("form-metadata"), true, []hdr{{"x-amz-meta-big", strings.Repeat("m", 3<<10)}}, file, 0)
			})},
	}
}
