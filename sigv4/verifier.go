package sigv4

import (
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"
)

// HeaderField is one request header as received (name in any case).
type HeaderField struct{ Name, Value string }

// Request is what Verify needs of an HTTP request; the gateway fills it from
// its server's request type without decoding anything.
type Request struct {
	Method   string
	Host     string        // Host header value as sent
	RawPath  string        // request-target path exactly as sent (still percent-encoded)
	RawQuery string        // exactly as sent, without '?'
	Headers  []HeaderField // all headers in received order; repeated names allowed
	// ObjectChecksum: an x-amz-checksum-* header describes the object being
	// assembled, not this request's payload (CompleteMultipartUpload), so it is
	// not verified against the body.
	ObjectChecksum bool
	// VirtualBucket is the bucket the Host header names (virtual-hosted
	// addressing), "" for a path-style request: a SigV2 canonical resource
	// starts with it.
	VirtualBucket string
}

// SecretStore finds the secret for an access key id. It returns
// ErrUnknownAccessKey (or an error wrapping it) for an unknown key.
type SecretStore interface {
	SecretKey(accessKeyID string) (secret string, err error)
}

// PayloadMode is how the body is protected, from x-amz-content-sha256.
type PayloadMode uint8

const (
	PayloadSHA256                   PayloadMode = iota // a hex SHA-256 of the whole body
	PayloadUnsigned                                    // UNSIGNED-PAYLOAD (and presigned URLs)
	PayloadStreamingSigned                             // STREAMING-AWS4-HMAC-SHA256-PAYLOAD
	PayloadStreamingSignedTrailer                      // STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER
	PayloadStreamingUnsignedTrailer                    // STREAMING-UNSIGNED-PAYLOAD-TRAILER
)

const (
	modeUnsigned       = "UNSIGNED-PAYLOAD"
	modeStreaming      = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	modeStreamingTrail = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	modeUnsignedTrail  = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	modeSigV4aPrefix   = "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD"
)

func (m PayloadMode) String() string {
	switch m {
	case PayloadSHA256:
		return "SHA256"
	case PayloadUnsigned:
		return modeUnsigned
	case PayloadStreamingSigned:
		return modeStreaming
	case PayloadStreamingSignedTrailer:
		return modeStreamingTrail
	case PayloadStreamingUnsignedTrailer:
		return modeUnsignedTrail
	}
	return "unknown"
}

// Chunked reports whether the body is aws-chunked encoded.
func (m PayloadMode) Chunked() bool { return m >= PayloadStreamingSigned }

// Verifier authenticates SigV4 requests. Secrets is required; the other
// fields have defaults. A Verifier must not be copied after first use (it
// holds the signing-key cache) and is safe for concurrent use.
type Verifier struct {
	Secrets SecretStore
	Region  string           // "" accepts any region in the credential scope
	Service string           // default "s3"
	MaxSkew time.Duration    // default 15 min
	Now     func() time.Time // default time.Now
	// DisableV2 refuses AWS Signature Version 2 (header and presigned forms)
	// with NotImplemented, for operators who want V4 only.
	DisableV2 bool

	keys keyCache
}

const defaultMaxSkew = 15 * time.Minute

// maxPresignExpires is S3's one-week limit for X-Amz-Expires.
const maxPresignExpires = 604800

func (v *Verifier) service() string {
	if v.Service == "" {
		return "s3"
	}
	return v.Service
}

func (v *Verifier) maxSkew() time.Duration {
	if v.MaxSkew <= 0 {
		return defaultMaxSkew
	}
	return v.MaxSkew
}

func (v *Verifier) now() time.Time {
	if v.Now == nil {
		return time.Now()
	}
	return v.Now()
}

// Verify authenticates r from its headers and query alone, before the body
// is read. It returns an *Error for every refusal; a request with no
// authentication at all gets AccessDenied wrapping ErrNoCredentials.
func (v *Verifier) Verify(r *Request) (*Auth, error) {
	var h headerScan
	h.scan(r.Headers)
	// The body's own headers sent as query parameters: the gateway hoists
	// every x-amz-* parameter into a header it sends on, so they describe
	// the body exactly as the headers would (a checksum the store is then
	// asked to hold it to is verified here too).
	h.scan(queryBodyHeaders(r.RawQuery))
	if r.ObjectChecksum {
		h.nChecksum = 0
	}
	presign := hasPresignParams(r.RawQuery)
	switch {
	case h.nAuth > 0:
		if presign != presignNone {
			return nil, errInvalidArgument("Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string parameter or the Authorization header should be specified",
				"Authorization", h.authorization)
		}
		if strings.HasPrefix(h.authorization, "AWS ") {
			if v.DisableV2 {
				return nil, errNotImplemented(msgV2Disabled)
			}
			return v.verifyHeaderV2(r, &h)
		}
		return v.verifyHeader(r, &h)
	case presign == presignV4:
		return v.verifyPresigned(r, &h)
	case presign == presignV2:
		if v.DisableV2 {
			return nil, errNotImplemented(msgV2Disabled)
		}
		return v.verifyPresignedV2(r, &h)
	}
	e := errAccessDenied("Access Denied")
	e.cause = ErrNoCredentials
	return nil, e
}

// credential is a parsed "AKID/date/region/service/aws4_request".
type credential struct {
	akid, scope, date, region, service, term string
}

func parseCredential(s string) (credential, bool) {
	var c credential
	i := strings.IndexByte(s, '/')
	if i <= 0 {
		return c, false
	}
	c.akid, c.scope = s[:i], s[i+1:]
	parts := c.scope
	var ok bool
	if c.date, parts, ok = strings.Cut(parts, "/"); !ok {
		return c, false
	}
	if c.region, parts, ok = strings.Cut(parts, "/"); !ok {
		return c, false
	}
	if c.service, c.term, ok = strings.Cut(parts, "/"); !ok || strings.IndexByte(c.term, '/') >= 0 {
		return c, false
	}
	return c, true
}

// checkScope validates the credential scope against the request date and
// the verifier's configuration; mk builds the error for the auth kind.
func (v *Verifier) checkScope(c *credential, amzDate string, mk func(string, ...any) *Error) *Error {
	if len(c.date) != 8 || c.date != amzDate[:8] {
		return mk("Invalid credential date \"%s\". Date is not the same as X-Amz-Date: \"%s\".", c.date, amzDate[:8])
	}
	if v.Region != "" && c.region != v.Region {
		e := mk("the region '%s' is wrong; expecting '%s'", c.region, v.Region)
		e.Fields = append(e.Fields, Field{"Region", v.Region})
		return e
	}
	if c.region == "" {
		return mk("the Credential is mal-formed; the region is empty")
	}
	if c.service != v.service() {
		return mk("the service '%s' is wrong; expecting '%s'", c.service, v.service())
	}
	if c.term != terminator {
		return mk("incorrect terminal '%s'. This endpoint uses '%s'.", c.term, terminator)
	}
	return nil
}

// checkSignature recomputes the request signature and compares it with the
// one provided, in constant time. On success it returns the signing key.
func (v *Verifier) checkSignature(r *Request, c *credential, amzDate, signedHeaders, payloadHash, skipQuery string, provided *[32]byte, providedHex string) ([32]byte, error) {
	secret, err := v.Secrets.SecretKey(c.akid)
	if err != nil {
		if errors.Is(err, ErrUnknownAccessKey) {
			return [32]byte{}, errInvalidAccessKey(c.akid, err)
		}
		e := newErr(CodeInternalError, http.StatusInternalServerError, "We encountered an internal error. Please try again.")
		e.cause = err
		return [32]byte{}, e
	}
	key := v.keys.get(c.akid, secret, c.date, c.region, c.service)

	s := scratchPool.Get().(*scratchBuf)
	defer putScratch(s)
	want, _ := s.sign(&key, r, skipQuery, signedHeaders, payloadHash, amzDate, c.scope, FoldSpaces)
	canon, sts := s.canon, s.sts
	if subtle.ConstantTimeCompare(want[:], provided[:]) != 1 && signedValuesFoldApart(r, signedHeaders) {
		// A value with a tab (or another whitespace than the space) has two
		// canonical forms, as the clients' signers fold it (Whitespace): the
		// other one is tried before the signature is refused. Either names
		// the same value up to the kind of its whitespace, which the stores
		// that fold it all (SeaweedFS, MinIO) do not tell apart either.
		alt := scratchPool.Get().(*scratchBuf)
		defer putScratch(alt)
		if again, _ := alt.sign(&key, r, skipQuery, signedHeaders, payloadHash, amzDate, c.scope, FoldAllWhitespace); subtle.ConstantTimeCompare(again[:], provided[:]) == 1 {
			return key, nil
		}
	}
	if subtle.ConstantTimeCompare(want[:], provided[:]) != 1 {
		return [32]byte{}, newErr(CodeSignatureDoesNotMatch, http.StatusForbidden,
			"The request signature we calculated does not match the signature you provided. Check your key and signing method.",
			Field{"AWSAccessKeyId", c.akid},
			Field{"StringToSign", string(sts[64:])},
			Field{"SignatureProvided", providedHex},
			Field{"CanonicalRequest", string(canon)})
	}
	return key, nil
}

// signedValuesFoldApart reports whether a header signedHeaders names has a
// value whose two Whitespace foldings may differ.
func signedValuesFoldApart(r *Request, signedHeaders string) bool {
	for i := range r.Headers {
		h := &r.Headers[i]
		if foldsApart(h.Value) && signedHeadersContain(signedHeaders, h.Name) {
			return true
		}
	}
	return false
}

func decodeSig(s string, dst *[32]byte) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.Decode(dst[:], []byte(s))
	return err == nil
}

// signedHeadersContain reports whether the ';'-list contains name.
func signedHeadersContain(list, name string) bool {
	for list != "" {
		var n string
		n, list, _ = strings.Cut(list, ";")
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// validSignedHeaders checks the list's syntax: non-empty names of token bytes.
func validSignedHeaders(list string) bool {
	if list == "" {
		return false
	}
	for list != "" {
		var n string
		var more bool
		n, list, more = strings.Cut(list, ";")
		if n == "" || (more && list == "") {
			return false
		}
		for i := 0; i < len(n); i++ {
			c := n[i]
			if c <= ' ' || c >= 0x7f || c == ':' || c == ',' {
				return false
			}
		}
	}
	return true
}
