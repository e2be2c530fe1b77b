package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Presign is a query-presigned request (X-Amz-* in the query), as S3's
// presigned URLs are: Path and Query to send, with Headers (signed, so the
// sender must send them with exactly these values) beside the host.
type Presign struct {
	Method string
	Host   string // as the request will carry it, with its port
	// Path is the request's path, already escaped as AppendEscapedPath does.
	Path string
	// Query holds parameters of the request's own, signed with the rest.
	Query map[string]string
	// Headers are signed headers (lower-case names) besides host.
	Headers map[string]string
}

// PresignQuery signs p with the credential and returns the query string to
// send it with (its own parameters and the X-Amz-* ones), valid from at for
// expires (at most a week).
func PresignQuery(p Presign, accessKey, secretKey, region string, at time.Time, expires time.Duration) string {
	at = at.UTC()
	date := at.Format(iso8601Basic)
	scope := date[:8] + "/" + region + "/s3/aws4_request"
	names := []string{"host"}
	for n := range p.Headers {
		names = append(names, strings.ToLower(n))
	}
	sort.Strings(names)
	q := map[string]string{}
	for k, v := range p.Query {
		q[k] = v
	}
	q["X-Amz-Algorithm"] = "AWS4-HMAC-SHA256"
	q["X-Amz-Credential"] = accessKey + "/" + scope
	q["X-Amz-Date"] = date
	q["X-Amz-Expires"] = strconv.FormatInt(int64(expires/time.Second), 10)
	q["X-Amz-SignedHeaders"] = strings.Join(names, ";")
	query := encodeQuery(q)

	var ch strings.Builder
	for _, n := range names {
		v := p.Host
		if n != "host" {
			v = strings.TrimSpace(p.Headers[n])
		}
		ch.WriteString(n + ":" + v + "\n")
	}
	canonical := p.Method + "\n" + p.Path + "\n" + query + "\n" + ch.String() + "\n" +
		strings.Join(names, ";") + "\nUNSIGNED-PAYLOAD"
	sum := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + date + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	key := hmacSHA256([]byte("AWS4"+secretKey), date[:8])
	for _, part := range []string{region, "s3", "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	return query + "&X-Amz-Signature=" + hex.EncodeToString(hmacSHA256(key, toSign))
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// encodeQuery is q's canonical form: names and values escaped as SigV4 wants,
// sorted by name.
func encodeQuery(q map[string]string) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	for i, k := range keys {
		if i > 0 {
			b = append(b, '&')
		}
		for j := 0; j < len(k); j++ {
			b = appendEscaped(b, k[j])
		}
		b = append(b, '=')
		v := q[k]
		for j := 0; j < len(v); j++ {
			b = appendEscaped(b, v[j])
		}
	}
	return string(b)
}

// PostPolicySignature is the SigV4 signature a browser form carries as
// x-amz-signature: the policy's base64 text HMAC'd with the signing key of
// secretKey for date (yyyymmdd), region and service s3. VerifyPost checks it.
func PostPolicySignature(policy, secretKey, date, region string) string {
	key := hmacSHA256([]byte("AWS4"+secretKey), date)
	for _, part := range []string{region, "s3", "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	return hex.EncodeToString(hmacSHA256(key, policy))
}
