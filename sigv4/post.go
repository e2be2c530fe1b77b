package sigv4

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// POST Object (browser-form uploads): the form carries a base64 policy
// document and its signature instead of a signed request. SigV4 signs the
// policy's base64 text with the signing key (x-amz-algorithm,
// x-amz-credential, x-amz-date, x-amz-signature); the older form signs it
// with HMAC-SHA1 of the secret itself (AWSAccessKeyId, signature). The
// policy's conditions are then evaluated against the form's fields.

// S3 error codes of POST Object.
const (
	CodeInvalidPolicyDocument = "InvalidPolicyDocument"
	CodeEntityTooSmall        = "EntityTooSmall"
	CodeEntityTooLarge        = "EntityTooLarge"
)

// PostRequest is a browser-form upload as far as the file part.
type PostRequest struct {
	Bucket string        // the bucket the form is posted to
	Fields []HeaderField // the form's fields before the file part, in order, names as sent
	// Filename is the file part's filename, which replaces ${filename} in the key.
	Filename string
}

// PostObject is a verified form upload: who signed it, the key, its fields,
// and the file size its policy allows.
type PostObject struct {
	Auth *Auth
	Key  string
	// Fields are the form's fields, names in lower case (the key with
	// ${filename} replaced).
	Fields []HeaderField
	// MinLength and MaxLength are the policy's content-length-range
	// (MaxLength -1 when it sets none).
	MinLength, MaxLength int64
}

// Get is the value of a field (name in lower case).
func (p *PostObject) Get(name string) (string, bool) {
	for _, f := range p.Fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// CheckLength checks the file's size against the policy's
// content-length-range.
func (p *PostObject) CheckLength(n int64) error {
	if p.MaxLength >= 0 && n > p.MaxLength {
		return ErrEntityTooLarge(n, p.MaxLength)
	}
	if n < p.MinLength {
		return newErr(CodeEntityTooSmall, http.StatusBadRequest, "Your proposed upload is smaller than the minimum allowed size",
			Field{"ProposedSize", strconv.FormatInt(n, 10)}, Field{"MinSizeAllowed", strconv.FormatInt(p.MinLength, 10)})
	}
	return nil
}

// ErrEntityTooLarge is S3's answer to a file over the size allowed; n is at
// least the bytes received.
func ErrEntityTooLarge(n, max int64) *Error {
	return newErr(CodeEntityTooLarge, http.StatusBadRequest, "Your proposed upload exceeds the maximum allowed size",
		Field{"ProposedSize", strconv.FormatInt(n, 10)}, Field{"MaxSizeAllowed", strconv.FormatInt(max, 10)})
}

func errMissingField(name string) *Error {
	return errInvalidArgument("Bucket POST must contain a field named '"+name+"'.  If it is specified, please check the order of the fields.", name, "")
}

func errPolicy(msg string) *Error {
	return newErr(CodeInvalidPolicyDocument, http.StatusBadRequest, "Invalid Policy: "+msg)
}

func errPolicyFailed(msg string) *Error {
	return errAccessDenied("Invalid according to Policy: " + msg)
}

// postExempt are the fields a policy need not name (S3: the signature, the
// file, the policy, x-ignore-*; and the older form's access key). Checksum
// fields are exempt too, as Ceph RGW has them: they cannot widen what is
// written, only check it.
func postExempt(name string) bool {
	switch name {
	case "policy", "x-amz-signature", "signature", "awsaccesskeyid", "file":
		return true
	}
	return strings.HasPrefix(name, "x-ignore-") || strings.HasPrefix(name, checksumHeaderPrefix)
}

// VerifyPost authenticates a form upload by its policy signature and checks
// the policy against the form. A form with no signature and no policy is
// anonymous: AccessDenied wrapping ErrNoCredentials.
func (v *Verifier) VerifyPost(r *PostRequest) (*PostObject, error) {
	p := &PostObject{MaxLength: -1}
	seen := make(map[string]bool, len(r.Fields))
	for _, f := range r.Fields {
		name := strings.ToLower(f.Name)
		if seen[name] {
			return nil, errInvalidArgument("The form field "+name+" may be sent only once.", name, f.Value)
		}
		seen[name] = true
		p.Fields = append(p.Fields, HeaderField{Name: name, Value: f.Value})
	}
	policy, hasPolicy := p.Get("policy")
	_, v4 := p.Get("x-amz-algorithm")
	if _, ok := p.Get("x-amz-credential"); ok {
		v4 = true
	}
	if _, ok := p.Get("x-amz-signature"); ok {
		v4 = true
	}
	_, v2 := p.Get("awsaccesskeyid")
	if _, ok := p.Get("signature"); ok {
		v2 = true
	}
	var auth *Auth
	var err error
	switch {
	case v4:
		auth, err = v.verifyPostV4(p, policy, hasPolicy)
	case v2:
		auth, err = v.verifyPostV2(p, policy, hasPolicy)
	case hasPolicy:
		return nil, errMissingField("x-amz-credential")
	default:
		e := errAccessDenied("Access Denied")
		e.cause = ErrNoCredentials
		return nil, e
	}
	if err != nil {
		return nil, err
	}
	p.Auth = auth
	key, ok := p.Get("key")
	if !ok {
		return nil, errMissingField("key")
	}
	p.Key = strings.ReplaceAll(key, "${filename}", r.Filename)
	for i := range p.Fields {
		if p.Fields[i].Name == "key" {
			p.Fields[i].Value = p.Key
		}
	}
	if e := auth.setPostChecksum(p); e != nil {
		return nil, e
	}
	if e := p.checkPolicy(policy, r.Bucket, v.now()); e != nil {
		return nil, e
	}
	return p, nil
}

func (v *Verifier) secret(akid string) (string, *Error) {
	secret, err := v.Secrets.SecretKey(akid)
	if err != nil {
		if errors.Is(err, ErrUnknownAccessKey) {
			return "", errInvalidAccessKey(akid, err)
		}
		e := newErr(CodeInternalError, http.StatusInternalServerError, "We encountered an internal error. Please try again.")
		e.cause = err
		return "", e
	}
	return secret, nil
}

func errPostSignature(akid, policy string) *Error {
	return newErr(CodeSignatureDoesNotMatch, http.StatusForbidden,
		"The request signature we calculated does not match the signature you provided. Check your key and signing method.",
		Field{"AWSAccessKeyId", akid}, Field{"StringToSign", policy})
}

func (v *Verifier) verifyPostV4(p *PostObject, policy string, hasPolicy bool) (*Auth, error) {
	for _, name := range []string{"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature"} {
		if _, ok := p.Get(name); !ok {
			return nil, errMissingField(name)
		}
	}
	if !hasPolicy {
		return nil, errMissingField("policy")
	}
	alg, _ := p.Get("x-amz-algorithm")
	if alg != algorithm {
		if alg == "AWS4-ECDSA-P256-SHA256" {
			return nil, errNotImplemented("AWS Signature Version 4A (AWS4-ECDSA-P256-SHA256) is not supported; sign with AWS4-HMAC-SHA256.")
		}
		return nil, errInvalidArgument("x-amz-algorithm only supports \""+algorithm+"\"", "x-amz-algorithm", alg)
	}
	credValue, _ := p.Get("x-amz-credential")
	cred, ok := parseCredential(credValue)
	if !ok {
		return nil, errInvalidArgument("Error parsing the X-Amz-Credential parameter; "+credentialFormat, "x-amz-credential", credValue)
	}
	amzDate, _ := p.Get("x-amz-date")
	t, err := time.Parse(iso8601Basic, amzDate)
	if err != nil || len(amzDate) != len(iso8601Basic) {
		return nil, errInvalidArgument("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"", "x-amz-date", amzDate)
	}
	if e := v.checkScope(&cred, amzDate, func(f string, a ...any) *Error {
		e := errf(CodeInvalidArgument, http.StatusBadRequest, "Error parsing the X-Amz-Credential parameter; "+f, a...)
		e.Fields = append(e.Fields, Field{"ArgumentName", "x-amz-credential"}, Field{"ArgumentValue", credValue})
		return e
	}); e != nil {
		return nil, e
	}
	sigHex, _ := p.Get("x-amz-signature")
	var sig [32]byte
	if !decodeSig(sigHex, &sig) {
		return nil, errPostSignature(cred.akid, policy)
	}
	secret, e := v.secret(cred.akid)
	if e != nil {
		return nil, e
	}
	key := v.keys.get(cred.akid, secret, cred.date, cred.region, cred.service)
	m := hmac.New(sha256.New, key[:])
	m.Write([]byte(policy))
	if subtle.ConstantTimeCompare(m.Sum(nil), sig[:]) != 1 {
		return nil, errPostSignature(cred.akid, policy)
	}
	return &Auth{AccessKeyID: cred.akid, Payload: PayloadUnsigned, Region: cred.region, Time: t,
		ContentLength: -1, DecodedContentLength: -1, signingKey: key, seed: sig, amzDate: amzDate, scope: cred.scope}, nil
}

func (v *Verifier) verifyPostV2(p *PostObject, policy string, hasPolicy bool) (*Auth, error) {
	akid, ok := p.Get("awsaccesskeyid")
	if !ok {
		return nil, errMissingField("AWSAccessKeyId")
	}
	sigB64, ok := p.Get("signature")
	if !ok {
		return nil, errMissingField("signature")
	}
	if !hasPolicy {
		return nil, errMissingField("policy")
	}
	secret, e := v.secret(akid)
	if e != nil {
		return nil, e
	}
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(policy))
	got, err := base64.StdEncoding.DecodeString(strings.TrimSpace(sigB64))
	if err != nil || subtle.ConstantTimeCompare(m.Sum(nil), got) != 1 {
		return nil, errPostSignature(akid, policy)
	}
	return &Auth{AccessKeyID: akid, Payload: PayloadUnsigned, Time: v.now(), ContentLength: -1, DecodedContentLength: -1}, nil
}

// setPostChecksum takes an x-amz-checksum-* field as the file's checksum,
// verified by the body reader (Auth.Body) like the header of a PutObject.
func (a *Auth) setPostChecksum(p *PostObject) *Error {
	n := 0
	for _, f := range p.Fields {
		c := checksumFromHeader(f.Name)
		if c == ckNone {
			continue
		}
		if n++; n > 1 {
			return errInvalidRequest("Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.")
		}
		v, ok := decodeChecksum(c, f.Value)
		if !ok {
			return errBadDigest(c.upperName())
		}
		a.checksum = v
	}
	return nil
}

// A condition of the policy: eq or starts-with on a field, or the
// content-length-range.
type postCondition struct {
	op, field, value string
	raw              string
}

// parsePolicy reads the base64 policy document: its expiration and its
// conditions. Names of the document's own keys are case-sensitive; condition
// operators and field names are not.
func parsePolicy(policy string) (time.Time, []postCondition, [2]int64, *Error) {
	rng := [2]int64{0, -1}
	doc, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(policy), ""))
	if err != nil {
		return time.Time{}, nil, rng, errPolicy("Invalid Base64 Encoded String.")
	}
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil || top == nil {
		return time.Time{}, nil, rng, errPolicy("Invalid JSON.")
	}
	rawExp, ok := top["expiration"]
	if !ok {
		return time.Time{}, nil, rng, errPolicy("Policy missing expiration.")
	}
	var exp string
	if json.Unmarshal(rawExp, &exp) != nil {
		return time.Time{}, nil, rng, errPolicy("Invalid 'expiration' value.")
	}
	expires, err := time.Parse(time.RFC3339Nano, exp)
	if err != nil || !strings.HasSuffix(exp, "Z") {
		return time.Time{}, nil, rng, errPolicy("Invalid 'expiration' value: '" + exp + "'")
	}
	rawConds, ok := top["conditions"]
	if !ok {
		return time.Time{}, nil, rng, errPolicy("Policy missing conditions.")
	}
	var list []json.RawMessage
	if json.Unmarshal(rawConds, &list) != nil {
		return time.Time{}, nil, rng, errPolicy("Invalid 'conditions' value: it must be a list.")
	}
	var conds []postCondition
	for _, raw := range list {
		c, e := parseCondition(raw, &rng)
		if e != nil {
			return time.Time{}, nil, rng, e
		}
		if c != nil {
			conds = append(conds, *c)
		}
	}
	return expires, conds, rng, nil
}

func parseCondition(raw json.RawMessage, rng *[2]int64) (*postCondition, *Error) {
	text := string(bytes.TrimSpace(raw))
	switch {
	case strings.HasPrefix(text, "{"):
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil || len(obj) != 1 {
			return nil, errPolicy("Invalid Simple-Condition: Simple-Conditions must have exactly one property specified.")
		}
		for name, rv := range obj {
			var value string
			if json.Unmarshal(rv, &value) != nil {
				return nil, errPolicy("Invalid Simple-Condition: value must be a string.")
			}
			return &postCondition{op: "eq", field: strings.ToLower(name), value: value, raw: text}, nil
		}
	case strings.HasPrefix(text, "["):
		var parts []json.RawMessage
		if json.Unmarshal(raw, &parts) != nil || len(parts) == 0 {
			return nil, errPolicy("Invalid Condition: " + text)
		}
		var op string
		if json.Unmarshal(parts[0], &op) != nil {
			return nil, errPolicy("Invalid Condition: " + text)
		}
		switch op = strings.ToLower(op); op {
		case "content-length-range":
			if len(parts) != 3 {
				return nil, errPolicy("Invalid content-length-range: it takes a minimum and a maximum.")
			}
			var n [2]int64
			for i := range n {
				s := strings.Trim(string(bytes.TrimSpace(parts[i+1])), `"`)
				v, err := strconv.ParseInt(s, 10, 64)
				if err != nil || v < 0 {
					return nil, errPolicy("Invalid content-length-range: " + text)
				}
				n[i] = v
			}
			if n[0] > n[1] {
				return nil, errPolicy("Invalid content-length-range: the minimum exceeds the maximum.")
			}
			// Every condition must hold: a second range narrows the first.
			if rng[1] >= 0 {
				n = [2]int64{max(n[0], rng[0]), min(n[1], rng[1])}
			}
			*rng = n
			return nil, nil
		case "eq", "starts-with":
			var field, value string
			if len(parts) != 3 || json.Unmarshal(parts[1], &field) != nil || json.Unmarshal(parts[2], &value) != nil ||
				!strings.HasPrefix(field, "$") || len(field) < 2 {
				return nil, errPolicy("Invalid Condition: " + text)
			}
			return &postCondition{op: op, field: strings.ToLower(field[1:]), value: value, raw: text}, nil
		}
		return nil, errPolicy("Invalid Condition: unknown operation " + strconv.Quote(op) + ".")
	}
	return nil, errPolicy("Invalid Condition: " + text)
}

// checkPolicy evaluates the policy against the form: not expired, every
// condition true, and every field (the bucket included) named by one.
func (p *PostObject) checkPolicy(policy, bucket string, now time.Time) *Error {
	expires, conds, rng, e := parsePolicy(policy)
	if e != nil {
		return e
	}
	if !now.Before(expires) {
		return errPolicyFailed("Policy expired.")
	}
	p.MinLength, p.MaxLength = rng[0], rng[1]
	value := func(name string) string {
		if name == "bucket" {
			return bucket
		}
		v, _ := p.Get(name)
		return v
	}
	covered := map[string]bool{}
	for _, c := range conds {
		covered[c.field] = true
		got := value(c.field)
		ok := got == c.value
		if c.op == "starts-with" {
			ok = strings.HasPrefix(got, c.value)
			if c.field == "content-type" && ok {
				// Each of a list of types must match.
				for _, t := range strings.Split(got, ",") {
					ok = ok && strings.HasPrefix(strings.TrimSpace(t), c.value)
				}
			}
		}
		if !ok {
			return errPolicyFailed("Policy Condition failed: " + c.raw)
		}
	}
	if !covered["bucket"] {
		return errPolicyFailed("Policy missing condition: bucket")
	}
	var extra []string
	for _, f := range p.Fields {
		if !covered[f.Name] && !postExempt(f.Name) && f.Name != "bucket" {
			extra = append(extra, f.Name)
		}
	}
	if len(extra) > 0 {
		return errPolicyFailed("Extra input fields: " + strings.Join(extra, ", "))
	}
	return nil
}
