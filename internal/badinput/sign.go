package badinput

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"
	"time"

	"github.com/fencegate/fencegate/sigv4"
)

// The corpus signs its own requests, byte for byte as they go on the wire,
// so that a case's bad part is its only bad part. The canonical request
// follows the rules the gateway's verifier (package sigv4) applies: the path
// as sent with each byte's percent-encoding normalised, query parameters
// decoded, re-encoded and sorted, repeated headers joined with ','. The
// package's tests check this signer against sigv4.Verifier.

const (
	algorithm = "AWS4-HMAC-SHA256"
	amzDate   = "20060102T150405Z"
	// Payload modes of x-amz-content-sha256.
	unsignedPayload  = "UNSIGNED-PAYLOAD"
	streamingPayload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	unsignedTrailer  = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
)

// hdr is one header line as sent: its name keeps its case.
type hdr struct{ name, value string }

type signer struct {
	access, secret, region string
	now                    time.Time
}

func (s signer) date() string { return s.now.UTC().Format(amzDate) }
func (s signer) scope() string {
	return s.now.UTC().Format("20060102") + "/" + s.region + "/s3/aws4_request"
}

func (s signer) key() []byte {
	k := hmacSum([]byte("AWS4"+s.secret), s.now.UTC().Format("20060102"))
	k = hmacSum(k, s.region)
	k = hmacSum(k, "s3")
	return hmacSum(k, "aws4_request")
}

func hmacSum(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// signature signs a request: its method, its origin-form target (path and
// query as sent), its headers and the names of those signed (lower case).
func (s signer) signature(method, target string, headers []hdr, signed []string, payload string) string {
	path, query, _ := strings.Cut(target, "?")
	var c strings.Builder
	c.WriteString(method + "\n")
	c.WriteString(normalize(path, false, true) + "\n")
	c.WriteString(canonicalQuery(query) + "\n")
	for _, name := range signed {
		var vals []string
		for _, h := range headers {
			if strings.EqualFold(h.name, name) {
				vals = append(vals, strings.Join(strings.Fields(h.value), " "))
			}
		}
		c.WriteString(name + ":" + strings.Join(vals, ",") + "\n")
	}
	c.WriteString("\n" + strings.Join(signed, ";") + "\n" + payload)
	sts := algorithm + "\n" + s.date() + "\n" + s.scope() + "\n" + sha256Hex([]byte(c.String()))
	return hex.EncodeToString(hmacSum(s.key(), sts))
}

// authorization is the Authorization header value for a signature.
func (s signer) authorization(signed []string, sig string) string {
	return algorithm + " Credential=" + s.access + "/" + s.scope() + ", SignedHeaders=" + strings.Join(signed, ";") + ", Signature=" + sig
}

// chunkSignature chains one aws-chunked chunk's signature from the previous one.
func (s signer) chunkSignature(prev string, data []byte) string {
	sts := "AWS4-HMAC-SHA256-PAYLOAD\n" + s.date() + "\n" + s.scope() + "\n" + prev + "\n" + sigv4.EmptySHA256 + "\n" + sha256Hex(data)
	return hex.EncodeToString(hmacSum(s.key(), sts))
}

// signedNames are the headers a client signs by default: every header but
// those that frame the message (which proxies may rewrite), lower-cased,
// sorted, once each.
func signedNames(headers []hdr) []string {
	seen := map[string]bool{}
	var names []string
	for _, h := range headers {
		l := strings.ToLower(h.name)
		switch l {
		case "content-length", "transfer-encoding", "connection", "expect", "authorization":
			continue
		}
		if !seen[l] {
			seen[l] = true
			names = append(names, l)
		}
	}
	sort.Strings(names)
	return names
}

const upperHex = "0123456789ABCDEF"

func unreserved(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~'
}

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

// normalize decodes s byte by byte (%XX; '+' as a space in a query) and
// re-encodes it with SigV4's rules; a '%' without two hex digits is literal.
func normalize(s string, plusIsSpace, keepSlash bool) string {
	if s == "" && keepSlash {
		return "/"
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/' && keepSlash:
			b.WriteByte('/')
			continue
		case c == '+' && plusIsSpace:
			c = ' '
		case c == '%' && i+2 < len(s):
			if hi, ok := unhex(s[i+1]); ok {
				if lo, ok := unhex(s[i+2]); ok {
					c, i = hi<<4|lo, i+2
				}
			}
		}
		if unreserved(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		}
	}
	return b.String()
}

func canonicalQuery(q string) string {
	var pairs [][2]string
	for _, part := range strings.Split(q, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		pairs = append(pairs, [2]string{normalize(k, true, false), normalize(v, true, false)})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i][0] != pairs[j][0] {
			return pairs[i][0] < pairs[j][0]
		}
		return pairs[i][1] < pairs[j][1]
	})
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p[0] + "=" + p[1]
	}
	return strings.Join(out, "&")
}
