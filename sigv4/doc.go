// Package sigv4 verifies what S3 clients sign and send: the gateway's front
// door. It is pure code (no network, no server types): the gateway adapts
// its requests into a Request and hands the raw body over as an io.Reader.
// Its Signer signs fencegate's own requests to the store on the same
// canonical request.
//
// # Flow
//
//	v := &sigv4.Verifier{Secrets: store, Region: "us-east-1"}
//	auth, err := v.Verify(req)   // headers and query only, before the body
//	body, err := auth.Body(raw)  // decoded payload, verified while it streams
//
// Verify accepts SigV4 header authentication (Authorization:
// AWS4-HMAC-SHA256 ...) and presigned URLs (X-Amz-* query parameters). The
// canonical request is built as S3 builds it: the path as sent with each
// segment's percent-encoding normalised (never double-encoded), query
// parameters decoded, re-encoded and sorted by key then value, header values
// trimmed with inner runs of spaces collapsed. Derived signing keys are cached
// per (access key, date, region, service), so a warm request costs one HMAC
// over the string to sign plus the canonical request hash.
//
// A request with no authentication gets AccessDenied wrapping
// ErrNoCredentials (errors.Is); the gateway decides about anonymous access.
// SigV2 and SigV4a are refused with NotImplemented.
//
// Auth.Body handles every x-amz-content-sha256 mode: a hex SHA-256 of the
// body, UNSIGNED-PAYLOAD, and the aws-chunked modes
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER] (chunk and trailer signatures
// chained from the seed signature) and STREAMING-UNSIGNED-PAYLOAD-TRAILER;
// trailing checksums named by x-amz-trailer; x-amz-checksum-* headers; and
// Content-MD5.
//
// # Guarantees the forwarder relies on
//
//   - The BodyReader holds back the final byte(s) of the payload until every
//     final check passed (payload hash, last chunk signature, trailer checksum
//     and signature, Content-MD5, x-amz-checksum-*, declared lengths): a
//     failed check is returned by Read before the last payload byte is
//     yielded, so an upstream request can be aborted rather than completed.
//   - It counts bytes itself: a raw reader that reports io.EOF before
//     Content-Length gives IncompleteBody, and nothing past Content-Length is
//     read.
//   - Memory is fixed whatever the client declares: chunks over 16 MiB, lines
//     over 4 KiB and trailer sections over 16 KiB are refused; nothing is
//     allocated in proportion to a declared size.
//
// # Errors
//
// Every refusal from Verify and BodyReader.Read is an *Error carrying the S3
// code, HTTP status, message and extra XML fields (StringToSign,
// CanonicalRequest, RequestTime, ...), ready to be rendered as an S3 error
// body. Errors of the raw reader itself (a reset connection, a timeout) are
// passed through unchanged. No secret ever appears in an error.
package sigv4
