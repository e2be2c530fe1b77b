package sigv4

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
)

const (
	algorithm    = "AWS4-HMAC-SHA256"
	terminator   = "aws4_request"
	iso8601Basic = "20060102T150405Z"
)

// EmptySHA256 is the payload hash of an empty body (x-amz-content-sha256).
const EmptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

const upperHex = "0123456789ABCDEF"

// unreserved marks the RFC 3986 unreserved bytes SigV4 leaves unescaped.
var unreserved = func() (t [256]bool) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
		t[c+'a'-'A'] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['-'], t['_'], t['.'], t['~'] = true, true, true, true
	return
}()

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func appendEscaped(dst []byte, c byte) []byte {
	if unreserved[c] {
		return append(dst, c)
	}
	return append(dst, '%', upperHex[c>>4], upperHex[c&15])
}

// AppendEscapedPath appends s (a bucket or a key) to a request path encoded
// as S3 signers encode it: unreserved bytes and '/' as they are, every other
// byte as %XX. Such a path is its own canonical URI, so the path a request is
// sent with and the one its signature covers are the same bytes.
func AppendEscapedPath(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '/' {
			dst = append(dst, c)
		} else {
			dst = appendEscaped(dst, c)
		}
	}
	return dst
}

// appendNormalized decodes s byte by byte and re-encodes it with SigV4's
// rules, in one pass. Because escaping works per byte, an encoded '/' (%2F)
// stays escaped, which is exactly "decode and re-encode each segment" for
// paths. A '%' not followed by two hex digits is taken literally (as S3's
// lenient decoder does) and so becomes %25. plusIsSpace applies the query
// string convention that '+' means a space.
// unescapeAt decodes the %XX escape at s[i], returning the byte and the index
// of its last character; a '%' not followed by two hex digits stands for itself.
func unescapeAt(s string, i int) (byte, int) {
	if i+2 < len(s) {
		if hi, ok := unhex(s[i+1]); ok {
			if lo, ok := unhex(s[i+2]); ok {
				return hi<<4 | lo, i + 2
			}
		}
	}
	return '%', i
}

func appendNormalized(dst []byte, s string, plusIsSpace, keepSlash bool) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/' && keepSlash:
			dst = append(dst, '/')
			continue
		case c == '+' && plusIsSpace:
			c = ' '
		case c == '%':
			c, i = unescapeAt(s, i)
		}
		dst = appendEscaped(dst, c)
	}
	return dst
}

// appendCanonicalURI writes S3's canonical path: the path as sent, with the
// percent-encoding of every segment normalised (never double-encoded).
func appendCanonicalURI(dst []byte, rawPath string) []byte {
	if rawPath == "" {
		return append(dst, '/')
	}
	return appendNormalized(dst, rawPath, false, true)
}

// queryPair holds offsets of one encoded pair inside the scratch buffer.
type queryPair struct{ k0, k1, v1 int }

// canonicalQuery appends the canonical query string to dst. skip names a
// (decoded) parameter left out, X-Amz-Signature for presigned URLs. scratch
// is reused space for the encoded pairs before sorting.
func appendCanonicalQuery(dst []byte, rawQuery, skip string, scratch *scratchBuf) []byte {
	if rawQuery == "" {
		return dst
	}
	enc := scratch.query[:0]
	pairs := scratch.pairs[:0]
	for q := rawQuery; q != ""; {
		var part string
		part, q, _ = strings.Cut(q, "&")
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		if skip != "" && decodedEquals(k, skip) {
			continue
		}
		p := queryPair{k0: len(enc)}
		enc = appendNormalized(enc, k, true, false)
		p.k1 = len(enc)
		enc = appendNormalized(enc, v, true, false)
		p.v1 = len(enc)
		pairs = append(pairs, p)
	}
	slices.SortFunc(pairs, func(a, b queryPair) int {
		if c := bytes.Compare(enc[a.k0:a.k1], enc[b.k0:b.k1]); c != 0 {
			return c
		}
		return bytes.Compare(enc[a.k1:a.v1], enc[b.k1:b.v1])
	})
	for i, p := range pairs {
		if i > 0 {
			dst = append(dst, '&')
		}
		dst = append(dst, enc[p.k0:p.k1]...)
		dst = append(dst, '=')
		dst = append(dst, enc[p.k1:p.v1]...)
	}
	scratch.query, scratch.pairs = enc, pairs
	return dst
}

// decodedEquals reports whether the query component s decodes to want,
// without allocating in the common unescaped case.
func decodedEquals(s, want string) bool {
	if s == want {
		return true
	}
	if !strings.ContainsAny(s, "%+") {
		return false
	}
	return queryUnescape(s) == want
}

// Whitespace is how a canonical header value folds the whitespace inside it.
// SigV4's text asks for "sequential spaces" collapsed; the signers part on
// what counts as one: aws-sdk-go-v2 and the Java SDK collapse spaces only,
// botocore (aws cli, boto3) every run of whitespace, tabs included, and
// SeaweedFS and MinIO verify so too (Go's strings.Fields). The two differ only
// on a value with a tab or another whitespace character than the space.
type Whitespace uint32

const (
	// FoldSpaces trims a value and collapses its runs of spaces.
	FoldSpaces Whitespace = iota
	// FoldAllWhitespace trims a value and collapses its runs of any
	// whitespace (unicode.IsSpace) to one space.
	FoldAllWhitespace
)

func (w Whitespace) String() string {
	if w == FoldAllWhitespace {
		return "every whitespace run folded"
	}
	return "space runs folded"
}

// foldsApart reports whether v's canonical form may differ between the two
// Whitespace foldings: it holds a control whitespace byte or a multi-byte
// character (U+0085 and U+00A0 are whitespace to unicode.IsSpace).
func foldsApart(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c >= 0x80 || c >= '\t' && c <= '\r' {
			return true
		}
	}
	return false
}

// appendHeaderValue writes v trimmed, with inner runs of spaces (fold
// FoldSpaces) or of any whitespace (FoldAllWhitespace) collapsed to one space.
func appendHeaderValue(dst []byte, v string, fold Whitespace) []byte {
	if fold == FoldAllWhitespace && foldsApart(v) {
		for i, f := range strings.Fields(v) {
			if i > 0 {
				dst = append(dst, ' ')
			}
			dst = append(dst, f...)
		}
		return dst
	}
	space := false
	start := len(dst)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == ' ' {
			space = true
			continue
		}
		if space && len(dst) > start {
			dst = append(dst, ' ')
		}
		space = false
		dst = append(dst, c)
	}
	return dst
}

func appendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// appendCanonicalHeaders writes "name:value\n" for every name in the
// semicolon-separated signedHeaders list, joining repeated headers with ','.
func appendCanonicalHeaders(dst []byte, r *Request, signedHeaders string, fold Whitespace) []byte {
	for list := signedHeaders; list != ""; {
		var name string
		name, list, _ = strings.Cut(list, ";")
		dst = appendLower(dst, name)
		dst = append(dst, ':')
		if r.Host != "" && strings.EqualFold(name, "host") {
			dst = appendHeaderValue(dst, r.Host, fold)
		} else {
			first := true
			for i := range r.Headers {
				h := &r.Headers[i]
				if !strings.EqualFold(h.Name, name) {
					continue
				}
				if !first {
					dst = append(dst, ',')
				}
				first = false
				dst = appendHeaderValue(dst, h.Value, fold)
			}
		}
		dst = append(dst, '\n')
	}
	return dst
}

// scratchBuf is pooled per-request working memory so that a warm
// verification allocates nothing for the canonical request.
type scratchBuf struct {
	canon []byte // canonical request
	sts   []byte // hmac pad (64 bytes) followed by the string to sign
	query []byte
	pairs []queryPair
}

var scratchPool = sync.Pool{New: func() any {
	return &scratchBuf{
		canon: make([]byte, 0, 1024),
		sts:   make([]byte, 0, 512),
		query: make([]byte, 0, 256),
		pairs: make([]queryPair, 0, 16),
	}
}}

// maxPooled keeps one huge request from pinning memory in the pool.
const maxPooled = 64 << 10

func putScratch(s *scratchBuf) {
	if cap(s.canon) > maxPooled || cap(s.query) > maxPooled || cap(s.sts) > maxPooled {
		return
	}
	scratchPool.Put(s)
}

// sign builds r's canonical request in s.canon (signedHeaders, payloadHash;
// skipQuery as appendCanonicalQuery's skip) and its string to sign in
// s.sts[64:], and returns the signature under key and where the canonical
// query sits in s.canon, header values folded as fold says. The Verifier
// checks a client's signature with it and the Signer signs fencegate's own
// requests: one canonical form for both.
func (s *scratchBuf) sign(key *[32]byte, r *Request, skipQuery, signedHeaders, payloadHash, amzDate, scope string, fold Whitespace) (sig [32]byte, query [2]int) {
	canon := append(s.canon[:0], r.Method...)
	canon = append(canon, '\n')
	canon = appendCanonicalURI(canon, r.RawPath)
	canon = append(canon, '\n')
	query[0] = len(canon)
	canon = appendCanonicalQuery(canon, r.RawQuery, skipQuery, s)
	query[1] = len(canon)
	canon = append(canon, '\n')
	canon = appendCanonicalHeaders(canon, r, signedHeaders, fold)
	canon = append(canon, '\n')
	canon = append(canon, signedHeaders...)
	canon = append(canon, '\n')
	canon = append(canon, payloadHash...)

	sts := append(s.sts[:0], make([]byte, 64)...) // room for hmacPadded's padded key
	sts = appendStringToSignPrefix(sts, amzDate, scope)
	sts = appendHexSum(sts, canon)
	s.canon, s.sts = canon, sts
	return hmacPadded(key, sts), query
}

// appendStringToSignPrefix writes the string to sign up to (and without) the
// canonical request hash.
func appendStringToSignPrefix(dst []byte, amzDate, scope string) []byte {
	dst = append(dst, algorithm...)
	dst = append(dst, '\n')
	dst = append(dst, amzDate...)
	dst = append(dst, '\n')
	dst = append(dst, scope...)
	return append(dst, '\n')
}

func appendHexSum(dst []byte, data []byte) []byte {
	sum := sha256.Sum256(data)
	return hex.AppendEncode(dst, sum[:])
}

// hmacPadded computes HMAC-SHA256 with a 32-byte key over buf[64:], using
// buf[:64] as room for the padded key so no allocation is needed. buf[:64]
// is clobbered.
func hmacPadded(key *[32]byte, buf []byte) [32]byte {
	pad := buf[:64]
	for i := range 32 {
		pad[i] = key[i] ^ 0x36
	}
	for i := 32; i < 64; i++ {
		pad[i] = 0x36
	}
	inner := sha256.Sum256(buf)
	var outer [64 + 32]byte
	for i := range 32 {
		outer[i] = key[i] ^ 0x5c
	}
	for i := 32; i < 64; i++ {
		outer[i] = 0x5c
	}
	copy(outer[64:], inner[:])
	return sha256.Sum256(outer[:])
}

// queryUnescape decodes a query component leniently ('+' is a space, a bad
// escape is literal), matching appendNormalized's reading of it.
func queryUnescape(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '+':
			c = ' '
		case c == '%':
			c, i = unescapeAt(s, i)
		}
		b = append(b, c)
	}
	return string(b)
}
