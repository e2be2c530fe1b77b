package gateway

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

// Which of a client's headers may reach the store is decided here, and only
// here, for every way a request arrives: a header-signed request's headers,
// a presigned URL's (with the x-amz-* query parameters hoisted from
// headers), an anonymous request's, and a POST form's fields. Everything
// else a client sends stays at the gateway: its cookies, proxies' headers,
// headers S3 does not document, and any header that would make the store do
// something other than what fencegate authorized. A header the store acts
// on is one admit (or the form's handler) checked permissions for: an ACL
// needs admin, a copy source needs read on the source bucket; a form may
// name neither, so its upload can only ever store its own file.

// arrival is how a client's header reaches the gateway.
type arrival uint8

const (
	// asHeader: a request header, or an x-amz-* query parameter SDK
	// presigners hoist from one.
	asHeader arrival = 1 << iota
	// asFormField: a field of a POST Object form (postobject.go), as S3
	// documents them for POST Object.
	asFormField
)

const asEither = asHeader | asFormField

// toStore is the allow-list: the request headers S3 documents, each with the
// arrivals it may come by (names in lower case). x-amz-meta-* and
// x-amz-grant-* are prefixes (toStorePrefixes).
var toStore = func() map[string]arrival {
	m := map[string]arrival{
		// Object properties.
		"content-type": asEither, "content-encoding": asEither, "content-disposition": asEither,
		"cache-control": asEither, "expires": asEither, "content-language": asHeader,
		"x-amz-storage-class": asEither, "x-amz-website-redirect-location": asEither,
		"x-amz-server-side-encryption": asEither, "x-amz-server-side-encryption-aws-kms-key-id": asEither,
		"x-amz-server-side-encryption-context": asEither, "x-amz-server-side-encryption-bucket-key-enabled": asEither,
		"x-amz-server-side-encryption-customer-algorithm": asEither, "x-amz-server-side-encryption-customer-key": asEither,
		"x-amz-server-side-encryption-customer-key-md5": asEither,
		// A form's acl and tagging fields are mapped to these (postHeaders).
		"x-amz-acl": asHeader, "x-amz-tagging": asHeader,
		"x-amz-object-lock-mode": asHeader, "x-amz-object-lock-retain-until-date": asHeader,
		"x-amz-object-lock-legal-hold": asHeader,
		// The payload's integrity: a form's checksum travels as the trailer.
		"content-md5": asHeader, "x-amz-checksum-algorithm": asHeader, "x-amz-sdk-checksum-algorithm": asHeader,
		"x-amz-checksum-type": asHeader, "x-amz-checksum-mode": asHeader,
		// Conditions and ranges.
		"if-match": asHeader, "if-none-match": asHeader, "if-modified-since": asHeader,
		"if-unmodified-since": asHeader, "range": asHeader,
		// Copies (CopyObject, UploadPartCopy): admit checks read on the source.
		"x-amz-copy-source": asHeader, "x-amz-copy-source-range": asHeader,
		"x-amz-copy-source-if-match": asHeader, "x-amz-copy-source-if-none-match": asHeader,
		"x-amz-copy-source-if-modified-since": asHeader, "x-amz-copy-source-if-unmodified-since": asHeader,
		"x-amz-copy-source-server-side-encryption-customer-algorithm": asHeader,
		"x-amz-copy-source-server-side-encryption-customer-key":       asHeader,
		"x-amz-copy-source-server-side-encryption-customer-key-md5":   asHeader,
		"x-amz-metadata-directive":                                    asHeader, "x-amz-tagging-directive": asHeader,
		// Ownership, payment, retention, listings of attributes, bucket creation.
		"x-amz-expected-bucket-owner": asHeader, "x-amz-source-expected-bucket-owner": asHeader,
		"x-amz-request-payer": asHeader, "x-amz-bypass-governance-retention": asHeader, "x-amz-mfa": asHeader,
		"x-amz-object-attributes": asHeader, "x-amz-max-parts": asHeader, "x-amz-part-number-marker": asHeader,
		"x-amz-optional-object-attributes": asHeader, "x-amz-bucket-object-lock-enabled": asHeader,
		"x-amz-object-ownership": asHeader,
	}
	for n := range store.ChecksumHeaders {
		m[n] = asHeader
	}
	return m
}()

// toStorePrefixes are the allow-list's families of names.
var toStorePrefixes = []struct {
	prefix string
	via    arrival
}{
	{"x-amz-meta-", asEither}, // user metadata (less fencegate's own attempt id)
	{"x-amz-grant-", asHeader},
}

// reachesStore reports whether a client's header (lower case) arriving by
// via may be sent on to the store.
func reachesStore(lower string, via arrival) bool {
	if lower == store.AttemptHeader {
		return false
	}
	if a, ok := toStore[lower]; ok {
		return a&via != 0
	}
	for _, p := range toStorePrefixes {
		if strings.HasPrefix(lower, p.prefix) {
			return p.via&via != 0
		}
	}
	return false
}

// forwardedHeader reports whether a request's header (lower case) travels to
// the store. The headers that describe the client's own signature and
// framing (readByGateway) are not in the list: the gateway's replace them.
func forwardedHeader(lower string) bool { return reachesStore(lower, asHeader) }

// maxUserMetadata is S3's limit on an object's user metadata: the bytes of
// each x-amz-meta-* key (without its prefix) and value, summed.
const maxUserMetadata = 2 << 10

// metadataTooLarge is S3's answer to user metadata over maxUserMetadata.
func metadataTooLarge(size int) *apiError {
	return &apiError{Code: "MetadataTooLarge", Status: http.StatusBadRequest,
		Message: "Your metadata headers exceed the maximum allowed metadata size.",
		Fields:  []sigv4.Field{{Name: "Size", Value: strconv.Itoa(size)}, {Name: "MaxSizeAllowed", Value: strconv.Itoa(maxUserMetadata)}}}
}

// userMetadataSize is the size S3 counts of the user metadata among names
// and values (names in lower case).
func userMetadataSize(name, value string) int {
	if k, ok := strings.CutPrefix(name, "x-amz-meta-"); ok {
		return len(k) + len(value)
	}
	return 0
}

// checkUserMetadata refuses a request whose headers carry more user
// metadata than S3 allows.
func (v *headerView) checkUserMetadata() *apiError {
	size := 0
	for _, f := range v.fields {
		size += userMetadataSize(f.name, f.value)
	}
	if size > maxUserMetadata {
		return metadataTooLarge(size)
	}
	return nil
}
