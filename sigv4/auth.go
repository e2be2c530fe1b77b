package sigv4

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Auth is the outcome of a successful Verify: who signed the request and
// everything the body verifier needs.
type Auth struct {
	AccessKeyID string
	Presigned   bool
	// SignatureV2: signed with AWS Signature Version 2 (v2.go); a presigned
	// URL's AWSAccessKeyId, Signature and Expires are its credentials.
	SignatureV2 bool
	Payload     PayloadMode // from x-amz-content-sha256 (presigned: UNSIGNED-PAYLOAD)
	Region      string      // region of the credential scope
	Time        time.Time   // the signed request time

	// ContentLength is the raw body length from Content-Length, or -1 for a
	// Transfer-Encoding: chunked body; 0 when neither header was sent.
	ContentLength int64
	// DecodedContentLength is x-amz-decoded-content-length, or -1.
	DecodedContentLength int64

	signingKey  [32]byte
	seed        [32]byte // the request signature: chunk signatures chain from it
	payloadHash [32]byte // PayloadSHA256 only
	amzDate     string
	scope       string
	contentMD5  [16]byte
	hasMD5      bool
	checksum    checksumValue // from an x-amz-checksum-* header; algo ckNone if none
	trailers    trailerSet    // announced by x-amz-trailer
}

// parsePayloadMode reads x-amz-content-sha256.
func parsePayloadMode(v string) (PayloadMode, [32]byte, *Error) {
	var sum [32]byte
	switch v {
	case modeUnsigned:
		return PayloadUnsigned, sum, nil
	case modeStreaming:
		return PayloadStreamingSigned, sum, nil
	case modeStreamingTrail:
		return PayloadStreamingSignedTrailer, sum, nil
	case modeUnsignedTrail:
		return PayloadStreamingUnsignedTrailer, sum, nil
	}
	if strings.HasPrefix(v, modeSigV4aPrefix) {
		return 0, sum, errNotImplemented("AWS Signature Version 4A payload signing (" + v + ") is not supported; use STREAMING-AWS4-HMAC-SHA256-PAYLOAD or UNSIGNED-PAYLOAD.")
	}
	if decodeSig(v, &sum) {
		return PayloadSHA256, sum, nil
	}
	return 0, sum, errInvalidArgument("x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a valid sha256 value.",
		"x-amz-content-sha256", v)
}

// newAuth completes a verified request's Auth with its body-related headers.
func newAuth(a Auth, h *headerScan) (*Auth, error) {
	if e := a.setBodyInfo(h); e != nil {
		return nil, e
	}
	return &a, nil
}

// setBodyInfo records the body-related headers, rejecting malformed ones
// now so the client is refused before it sends its body.
func (a *Auth) setBodyInfo(h *headerScan) *Error {
	a.ContentLength, a.DecodedContentLength = 0, -1
	switch {
	case h.chunkedTE:
		// The raw reader the gateway passes is already de-chunked by HTTP;
		// its end is the only length there is.
		a.ContentLength = -1
	case h.nContentLength > 1:
		return errInvalidArgument("Content-Length is repeated", "Content-Length", h.contentLength)
	case h.nContentLength == 1:
		n, err := strconv.ParseInt(strings.TrimSpace(h.contentLength), 10, 64)
		if err != nil || n < 0 {
			return errInvalidArgument("Content-Length is invalid", "Content-Length", h.contentLength)
		}
		a.ContentLength = n
	}
	if a.Payload.Chunked() && h.nDecoded > 0 {
		n, err := strconv.ParseInt(strings.TrimSpace(h.decodedLength), 10, 64)
		if err != nil || n < 0 || h.nDecoded > 1 {
			return errInvalidArgument("x-amz-decoded-content-length is invalid", "x-amz-decoded-content-length", h.decodedLength)
		}
		a.DecodedContentLength = n
	}
	if h.nMD5 > 0 {
		v := strings.TrimSpace(h.contentMD5)
		var tmp [18]byte
		n, err := 0, error(nil)
		if base64.StdEncoding.DecodedLen(len(v)) <= len(tmp) {
			n, err = base64.StdEncoding.Decode(tmp[:], []byte(v))
		}
		if h.nMD5 > 1 || err != nil || n != md5.Size {
			return newErr(CodeInvalidDigest, http.StatusBadRequest, "The Content-MD5 you specified was invalid.",
				Field{"Content-MD5", h.contentMD5})
		}
		copy(a.contentMD5[:], tmp[:n])
		a.hasMD5 = true
	}
	if h.nChecksum > 1 {
		return errInvalidRequest("Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.")
	}
	if h.nChecksum == 1 {
		c, ok := decodeChecksum(h.checksumAlgo, h.checksumValue)
		if !ok {
			// A value that does not even decode cannot match the body:
			// BadDigest, as Ceph RGW and SeaweedFS answer and ceph/s3-tests
			// expects (test_object_checksum_sha256). (versitygw answers
			// InvalidRequest "Value for ... header is invalid."; both are 400.)
			return errBadDigest(h.checksumAlgo.upperName())
		}
		a.checksum = c
	}
	if h.nTrailer > 0 {
		set, e := parseTrailerHeader(h.trailer)
		if e != nil {
			return e
		}
		if set != 0 && a.Payload != PayloadStreamingSignedTrailer && a.Payload != PayloadStreamingUnsignedTrailer {
			return errInvalidRequest("x-amz-trailer requires x-amz-content-sha256 %s or %s", modeStreamingTrail, modeUnsignedTrail)
		}
		a.trailers = set
	}
	return nil
}

// SeedSignature returns the request signature in hex (the first link of the
// chunk-signature chain).
func (a *Auth) SeedSignature() string { return hex.EncodeToString(a.seed[:]) }
