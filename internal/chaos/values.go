package chaos

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
)

// Every write writes a value of its own: a short name ("c3-17", "m2-5",
// "d-9") at the head of a body whose length and filler follow from the name,
// so a read names the write it saw and proves the bytes whole. Copies write
// their source's value; sources never change.

// bodyOf is the object body of value v: "v:" then filler, 64 B to 4 KiB.
func bodyOf(v string) []byte {
	h := fnv.New64a()
	h.Write([]byte(v))
	sum := h.Sum64()
	n := 64 + int(sum%4032)
	var b strings.Builder
	b.Grow(n)
	b.WriteString(v)
	b.WriteByte(':')
	for b.Len() < n {
		var x [8]byte
		binary.LittleEndian.PutUint64(x[:], sum)
		b.WriteString(hex.EncodeToString(x[:]))
		sum = sum*6364136223846793005 + 1442695040888963407
	}
	return []byte(b.String()[:n])
}

// valueOfBody names the value a body holds, or "corrupt:..." when the bytes
// are not exactly one value's body (a torn or foreign write).
func valueOfBody(b []byte) string {
	name, _, ok := strings.Cut(string(b), ":")
	if !ok || string(bodyOf(name)) != string(b) {
		if len(b) > 24 {
			b = b[:24]
		}
		return "corrupt:" + string(b)
	}
	return name
}

func md5Hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// multipartETag is S3's ETag of an object completed from these parts.
func multipartETag(parts ...[]byte) string {
	var all []byte
	for _, p := range parts {
		s := md5.Sum(p)
		all = append(all, s[:]...)
	}
	return md5Hex(all) + "-" + strconv.Itoa(len(parts))
}

func crc32Base64(b []byte) string {
	var x [4]byte
	binary.BigEndian.PutUint32(x[:], crc32.ChecksumIEEE(b))
	return base64.StdEncoding.EncodeToString(x[:])
}

// etagBook maps ETags to the values they name, for HEAD (which answers an
// ETag, not a body) and If-Match (which sends one).
type etagBook struct {
	mu     sync.Mutex
	byETag map[string]string
	byVal  map[string]string
}

func newETagBook() *etagBook {
	return &etagBook{byETag: map[string]string{}, byVal: map[string]string{}}
}

func (e *etagBook) add(value, etag string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byETag[etag] = value
	e.byVal[value] = etag
}

func (e *etagBook) value(etag string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.byETag[strings.Trim(etag, `"`)]
	return v, ok
}

func (e *etagBook) etag(value string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.byVal[value]
}

func randomKey(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))[:n]
}
