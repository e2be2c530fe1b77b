package sigv4

import (
	"net/http"
	"strings"
	"time"
)

// headerScan holds the headers Verify and the body verifier care about,
// found in one pass over Request.Headers.
type headerScan struct {
	authorization string
	amzDate       string
	date          string
	contentSHA    string
	contentLength string
	decodedLength string
	contentMD5    string
	checksumValue string
	trailer       string
	checksumAlgo  checksumAlgo
	chunkedTE     bool

	nAuth, nAmzDate, nDate, nContentSHA, nContentLength int
	nDecoded, nMD5, nChecksum, nTrailer                 int
}

func (s *headerScan) scan(hs []HeaderField) {
	for i := range hs {
		name, val := hs[i].Name, hs[i].Value
		switch len(name) {
		case len("authorization"): // == len("x-amz-trailer")
			if strings.EqualFold(name, "authorization") {
				s.authorization, s.nAuth = val, s.nAuth+1
			} else if strings.EqualFold(name, "x-amz-trailer") {
				s.trailer, s.nTrailer = val, s.nTrailer+1
			}
		case len("x-amz-date"):
			if strings.EqualFold(name, "x-amz-date") {
				s.amzDate, s.nAmzDate = val, s.nAmzDate+1
			}
		case len("date"):
			if strings.EqualFold(name, "date") {
				s.date, s.nDate = val, s.nDate+1
			}
		case len("x-amz-content-sha256"):
			if strings.EqualFold(name, "x-amz-content-sha256") {
				s.contentSHA, s.nContentSHA = val, s.nContentSHA+1
			} else if a := checksumFromHeader(name); a != ckNone {
				s.checksumAlgo, s.checksumValue, s.nChecksum = a, val, s.nChecksum+1
			}
		case len("content-length"):
			if strings.EqualFold(name, "content-length") {
				s.contentLength, s.nContentLength = val, s.nContentLength+1
			}
		case len("transfer-encoding"):
			if strings.EqualFold(name, "transfer-encoding") && strings.Contains(strings.ToLower(val), "chunked") {
				s.chunkedTE = true
			}
		case len("x-amz-decoded-content-length"):
			if strings.EqualFold(name, "x-amz-decoded-content-length") {
				s.decodedLength, s.nDecoded = val, s.nDecoded+1
			}
		case len("content-md5"):
			if strings.EqualFold(name, "content-md5") {
				s.contentMD5, s.nMD5 = val, s.nMD5+1
			}
		default:
			if a := checksumFromHeader(name); a != ckNone {
				s.checksumAlgo, s.checksumValue, s.nChecksum = a, val, s.nChecksum+1
			}
		}
	}
}

// headerAuth is a parsed Authorization header.
type headerAuth struct {
	credential, signedHeaders, signature string
}

const credentialFormat = `the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".`

// parseAuthorization parses "AWS4-HMAC-SHA256 Credential=..,
// SignedHeaders=.., Signature=..". Other schemes are refused with the error
// S3 gives them.
func parseAuthorization(v string) (headerAuth, *Error) {
	var a headerAuth
	rest, ok := strings.CutPrefix(v, algorithm)
	if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
		switch {
		case strings.HasPrefix(v, "AWS4-ECDSA-P256-SHA256"):
			return a, errNotImplemented("AWS Signature Version 4A (AWS4-ECDSA-P256-SHA256) is not supported; sign requests with AWS4-HMAC-SHA256.")
		case strings.HasPrefix(v, "AWS "):
			return a, errNotImplemented("AWS Signature Version 2 is not supported; sign requests with AWS Signature Version 4 (AWS4-HMAC-SHA256).")
		}
		return a, errInvalidArgument("Unsupported Authorization Type", "Authorization", v)
	}
	var seen int
	for rest != "" {
		var part string
		part, rest, _ = strings.Cut(rest, ",")
		part = strings.TrimSpace(part)
		if part == "" {
			return a, errHeaderMalformed("the authorization header has an empty component.")
		}
		key, val, ok := strings.Cut(part, "=")
		if !ok {
			return a, errHeaderMalformed("the authorization component \"%s\" is malformed.", part)
		}
		var dst *string
		var bit int
		switch key {
		case "Credential":
			dst, bit = &a.credential, 1
		case "SignedHeaders":
			dst, bit = &a.signedHeaders, 2
		case "Signature":
			dst, bit = &a.signature, 4
		default:
			return a, errHeaderMalformed("the authorization component \"%s\" is malformed.", part)
		}
		if seen&bit != 0 {
			return a, errHeaderMalformed("the authorization component \"%s\" is repeated.", key)
		}
		seen |= bit
		*dst = val
	}
	switch {
	case seen&1 == 0:
		return a, errHeaderMalformed("missing Credential.")
	case seen&2 == 0:
		return a, errHeaderMalformed("missing SignedHeaders.")
	case seen&4 == 0:
		return a, errHeaderMalformed("missing Signature.")
	}
	return a, nil
}

func (v *Verifier) verifyHeader(r *Request, h *headerScan) (*Auth, error) {
	if h.nAuth > 1 {
		return nil, errHeaderMalformed("the Authorization header is repeated.")
	}
	ha, e := parseAuthorization(h.authorization)
	if e != nil {
		return nil, e
	}
	cred, ok := parseCredential(ha.credential)
	if !ok {
		return nil, errHeaderMalformed(credentialFormat)
	}
	var sig [32]byte
	if !decodeSig(ha.signature, &sig) {
		return nil, errHeaderMalformed("the Signature must be 64 hexadecimal characters.")
	}
	if !validSignedHeaders(ha.signedHeaders) {
		return nil, errHeaderMalformed("the SignedHeaders list is malformed.")
	}

	// x-amz-date wins over Date; the string to sign always carries the
	// ISO 8601 basic form.
	var t time.Time
	var amzDate, sentDate string
	var err error
	switch {
	case h.nAmzDate > 0:
		sentDate, amzDate = h.amzDate, h.amzDate
		t, err = time.Parse(iso8601Basic, amzDate)
	case h.nDate > 0:
		sentDate = h.date
		t, err = http.ParseTime(h.date)
		amzDate = t.UTC().Format(iso8601Basic)
	default:
		return nil, errAccessDenied("AWS authentication requires a valid Date or x-amz-date header")
	}
	if err != nil || len(amzDate) != len(iso8601Basic) {
		return nil, errAccessDenied("AWS authentication requires a valid Date or x-amz-date header")
	}
	if e := v.checkScope(&cred, amzDate, errHeaderMalformed); e != nil {
		return nil, e
	}
	if !signedHeadersContain(ha.signedHeaders, "host") {
		return nil, errHeaderMalformed("the SignedHeaders list must include 'host'.")
	}
	for _, must := range [...]struct {
		n    int
		name string
	}{{h.nAmzDate, "x-amz-date"}, {h.nContentSHA, "x-amz-content-sha256"}} {
		if must.n > 0 && !signedHeadersContain(ha.signedHeaders, must.name) {
			return nil, errHeadersNotSigned(must.name)
		}
	}
	if name, ok := unsignedAmzHeader(r.Headers, ha.signedHeaders, false); ok {
		return nil, errHeadersNotSigned(name)
	}
	if h.nContentSHA == 0 {
		return nil, errInvalidRequest("Missing required header for this request: x-amz-content-sha256")
	}
	mode, payloadHash, e := parsePayloadMode(h.contentSHA)
	if e != nil {
		return nil, e
	}
	now := v.now()
	if d := now.Sub(t); d > v.maxSkew() || d < -v.maxSkew() {
		return nil, errSkewed(sentDate, now, v.maxSkew())
	}
	key, err := v.checkSignature(r, &cred, amzDate, ha.signedHeaders, h.contentSHA, "", &sig, ha.signature)
	if err != nil {
		return nil, err
	}
	return newAuth(Auth{
		AccessKeyID: cred.akid,
		Payload:     mode,
		Region:      cred.region,
		Time:        t,
		payloadHash: payloadHash,
		signingKey:  key,
		seed:        sig,
		amzDate:     amzDate,
		scope:       cred.scope,
	}, h)
}
