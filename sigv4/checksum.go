package sigv4

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"hash/crc32"
	"strings"

	"github.com/minio/crc64nvme"
)

// checksumAlgo is one of the x-amz-checksum-* algorithms.
type checksumAlgo uint8

const (
	ckNone checksumAlgo = iota
	ckCRC32
	ckCRC32C
	ckCRC64NVME
	ckSHA1
	ckSHA256
	ckCount
)

var checksumNames = [ckCount]string{"", "crc32", "crc32c", "crc64nvme", "sha1", "sha256"}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const checksumHeaderPrefix = "x-amz-checksum-"

// checksumFromHeader maps "x-amz-checksum-crc32" (any case) to its algorithm;
// other x-amz-checksum-* headers (-mode, -type, -algorithm) are not checksums.
func checksumFromHeader(name string) checksumAlgo {
	if len(name) <= len(checksumHeaderPrefix) || !strings.EqualFold(name[:len(checksumHeaderPrefix)], checksumHeaderPrefix) {
		return ckNone
	}
	suffix := name[len(checksumHeaderPrefix):]
	for a := ckCRC32; a < ckCount; a++ {
		if strings.EqualFold(suffix, checksumNames[a]) {
			return a
		}
	}
	return ckNone
}

func (a checksumAlgo) headerName() string { return checksumHeaderPrefix + checksumNames[a] }

func (a checksumAlgo) size() int {
	switch a {
	case ckCRC32, ckCRC32C:
		return 4
	case ckCRC64NVME:
		return 8
	case ckSHA1:
		return sha1.Size
	case ckSHA256:
		return sha256.Size
	}
	return 0
}

func (a checksumAlgo) newHash() hash.Hash {
	switch a {
	case ckCRC32:
		return crc32.NewIEEE()
	case ckCRC32C:
		return crc32.New(castagnoli)
	case ckCRC64NVME:
		return crc64nvme.New()
	case ckSHA1:
		return sha1.New()
	case ckSHA256:
		return sha256.New()
	}
	return nil
}

// checksumValue is a decoded x-amz-checksum-* value (big-endian digest).
type checksumValue struct {
	algo checksumAlgo
	n    uint8
	b    [32]byte
}

// decodeChecksum decodes a base64 checksum value and checks its length.
func decodeChecksum(a checksumAlgo, v string) (checksumValue, bool) {
	c := checksumValue{algo: a}
	v = strings.TrimSpace(v)
	if base64.StdEncoding.DecodedLen(len(v)) > len(c.b)+2 {
		return c, false
	}
	var tmp [36]byte
	n, err := base64.StdEncoding.Decode(tmp[:], []byte(v))
	if err != nil || n != a.size() {
		return c, false
	}
	copy(c.b[:], tmp[:n])
	c.n = uint8(n)
	return c, true
}

// trailerSet is a set of announced trailer checksums, one bit per algo.
type trailerSet uint8

func (s trailerSet) has(a checksumAlgo) bool { return s&(1<<a) != 0 }

// parseTrailerHeader parses x-amz-trailer: a comma-separated list of
// x-amz-checksum-* names.
func parseTrailerHeader(v string) (trailerSet, *Error) {
	var s trailerSet
	for v != "" {
		var name string
		name, v, _ = strings.Cut(v, ",")
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		a := checksumFromHeader(name)
		if a == ckNone {
			return 0, errInvalidRequest("The value specified in the x-amz-trailer header is not supported: %q", name)
		}
		s |= 1 << a
	}
	return s, nil
}

func (a checksumAlgo) upperName() string {
	switch a {
	case ckCRC32:
		return "CRC32"
	case ckCRC32C:
		return "CRC32C"
	case ckCRC64NVME:
		return "CRC64NVME"
	case ckSHA1:
		return "SHA1"
	case ckSHA256:
		return "SHA256"
	}
	return ""
}
