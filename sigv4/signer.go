package sigv4

import (
	"encoding/hex"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Signer signs requests with one credential: fencegate's own, toward the
// store behind it. It builds the canonical request with the same code the
// Verifier checks clients with (S3's canonical path, query and headers), and
// derives the signing key once a day. The zero value is not usable: set the
// fields. It is safe for concurrent use.
type Signer struct {
	AccessKey, SecretKey string
	Region, Service      string
	keys                 keyCache
	// fold is the Whitespace the store folds signed header values with
	// (SetWhitespace); FoldSpaces until told.
	fold atomic.Uint32
}

// SetWhitespace signs from now on with header values folded as w: as the
// store verifies them (learnt by the gateway's start-up probe).
func (s *Signer) SetWhitespace(w Whitespace) { s.fold.Store(uint32(w)) }

// Whitespace is the folding the signer signs with.
func (s *Signer) Whitespace() Whitespace { return Whitespace(s.fold.Load()) }

// unsignedHeaders are never signed: they describe the hop (a proxy may
// rewrite them) or carry the signature itself.
var unsignedHeaders = []string{"authorization", "user-agent", "expect", "transfer-encoding", "connection", "content-length", "x-amzn-trace-id"}

// SignedRequest is what Sign produces for a request.
type SignedRequest struct {
	// Query is the canonical query string: the request should be sent with
	// it, so the store's reading of the query is the one signed.
	Query         string
	Authorization string
}

// AmzDate formats t as x-amz-date.
func AmzDate(t time.Time) string { return t.UTC().Format(iso8601Basic) }

// Sign signs r at amzDate (x-amz-date's value, which r.Headers must carry,
// as they must x-amz-content-sha256 with payloadHash) and returns its
// Authorization header and canonical query. Every header in r.Headers is
// signed except the hop's own (unsignedHeaders), and the host (r.Host).
func (s *Signer) Sign(r *Request, amzDate, payloadHash string) SignedRequest {
	sc := scratchPool.Get().(*scratchBuf)
	defer putScratch(sc)

	// Signed header names: host and every header present, lower case,
	// sorted, once each. They are gathered in sc.sts, which the string to
	// sign reuses once they have been copied out.
	names := sc.sts[:0]
	var bounds [32][2]int
	spans := bounds[:0]
	addName := func(n string) {
		start := len(names)
		names = appendLower(names, n)
		lower := names[start:]
		for _, u := range unsignedHeaders {
			if string(lower) == u {
				names = names[:start]
				return
			}
		}
		for _, sp := range spans {
			if string(names[sp[0]:sp[1]]) == string(lower) {
				names = names[:start]
				return
			}
		}
		spans = append(spans, [2]int{start, len(names)})
	}
	addName("host")
	for i := range r.Headers {
		addName(r.Headers[i].Name)
	}
	slices.SortFunc(spans, func(a, b [2]int) int {
		return strings.Compare(string(names[a[0]:a[1]]), string(names[b[0]:b[1]]))
	})
	var signed strings.Builder
	signed.Grow(len(names) + len(spans))
	for i, sp := range spans {
		if i > 0 {
			signed.WriteByte(';')
		}
		signed.Write(names[sp[0]:sp[1]])
	}
	signedHeaders := signed.String()
	sc.sts = names[:0] // keep what it grew to

	date := amzDate[:8]
	scope := date + "/" + s.Region + "/" + s.Service + "/" + terminator
	key := s.keys.get(s.AccessKey, s.SecretKey, date, s.Region, s.Service)
	sig, q := sc.sign(&key, r, "", signedHeaders, payloadHash, amzDate, scope, s.Whitespace())
	query := string(sc.canon[q[0]:q[1]])

	var b strings.Builder
	b.Grow(len(algorithm) + len(s.AccessKey) + len(scope) + len(signedHeaders) + 2*len(sig) + 48)
	b.WriteString(algorithm)
	b.WriteString(" Credential=")
	b.WriteString(s.AccessKey)
	b.WriteByte('/')
	b.WriteString(scope)
	b.WriteString(", SignedHeaders=")
	b.WriteString(signedHeaders)
	b.WriteString(", Signature=")
	var hexSig [64]byte
	hex.Encode(hexSig[:], sig[:])
	b.Write(hexSig[:])
	return SignedRequest{Query: query, Authorization: b.String()}
}
