package chaos

import (
	"bytes"
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

// largePrefix heads the name of a large value: the big key's writes write
// them (prefixFor), 2 to 24 MiB, so that some bodies are spooled to disk and
// some are too large to spool and are streamed, and every one outlasts the
// sockets' buffers, so that a fault can stop the store in the middle of one
// (store-stall-body).
const largePrefix = "L"

const (
	largeMin    = 2 << 20
	largeSpread = 22 << 20
	// fillerBlock is how much filler a large value draws; the rest repeats
	// it (the checks compare whole bodies, and drawing 24 MiB of filler on
	// every read would cost more than the read).
	fillerBlock = 64 << 10
)

// prefixFor is the name prefix of a value written at key by a write of the
// given kind ("c", "m"): large at the big key.
func prefixFor(key, kind string) string {
	if key == bigKey {
		return largePrefix + kind
	}
	return kind
}

// writeOf names the kind of write that writes value v: "put" (a PutObject,
// its checksum declared: "c..."), "complete" (a multipart upload: "m..."), or
// "copy" (a source's value), large or not.
func writeOf(v string) string {
	switch v = strings.TrimPrefix(v, largePrefix); {
	case strings.HasPrefix(v, "c"):
		return "put"
	case strings.HasPrefix(v, "m"):
		return "complete"
	}
	return "copy"
}

// bodyOf is the object body of value v: "v:" then filler, 64 B to 4 KiB (2 to
// 24 MiB for a large value).
func bodyOf(v string) []byte {
	h := fnv.New64a()
	h.Write([]byte(v))
	sum := h.Sum64()
	n := 64 + int(sum%4032)
	if strings.HasPrefix(v, largePrefix) {
		n = largeMin + int(sum%largeSpread)
	}
	b := make([]byte, 0, n+16) // the filler is drawn 16 bytes at a time
	b = append(b, v...)
	b = append(b, ':')
	for len(b) < min(n, fillerBlock) {
		var x [8]byte
		binary.LittleEndian.PutUint64(x[:], sum)
		b = hex.AppendEncode(b, x[:])
		sum = sum*6364136223846793005 + 1442695040888963407
	}
	b = b[:min(len(b), n)]
	filler := b[len(v)+1:]
	for len(b) < n {
		b = append(b, filler[:min(len(filler), n-len(b))]...)
	}
	return b
}

// valueOfBody names the value a body holds, or "corrupt:..." when the bytes
// are not exactly one value's body (a torn or foreign write).
func valueOfBody(b []byte) string {
	name, _, ok := strings.Cut(string(b), ":")
	if !ok || !bytes.Equal(bodyOf(name), b) {
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
