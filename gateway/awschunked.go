package gateway

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"strconv"
	"sync/atomic"

	"github.com/fencegate/fencegate/store"
)

// The store verifies what fencegate forwards itself (docs/DESIGN.md, W9): object data
// goes upstream as aws-chunked with a trailing checksum, so a body cut short at
// any byte (a client gone, a gateway killed) is an incomplete encoding the store
// refuses, never a shorter object it could publish.
const upstreamChunkSize = 1 << 20

// trailerSource yields the trailing checksum once the payload has been read.
type trailerSource func() (value string, err error)

// chunkEncoder frames a payload of known length as aws-chunked with one
// trailer, reading straight into the caller's buffer (no copy of the data).
type chunkEncoder struct {
	src       io.Reader
	remaining int64 // payload bytes not yet read
	inChunk   int64 // payload bytes left in the current chunk
	pending   []byte
	buf       [96]byte // a chunk's header, or the last chunk with the trailer
	// crc is the payload's CRC32 when fencegate computes the checksum itself
	// (value is nil).
	crc      uint32
	name     string
	value    trailerSource
	done     bool
	checksum string // "alg:value" as the trailer sent it, once done
	// payloadRead counts payload bytes read so far (read by the lease's
	// progress reports from another goroutine).
	payloadRead atomic.Int64
}

// newChunkEncoder frames n bytes of src. If value is nil, fencegate computes a
// CRC32 of the payload and sends it as x-amz-checksum-crc32.
func newChunkEncoder(src io.Reader, n int64, name string, value trailerSource) *chunkEncoder {
	e := &chunkEncoder{src: src, remaining: n, name: name, value: value}
	if value == nil {
		e.name = "x-amz-checksum-crc32"
	}
	return e
}

// trailerValue is the trailing checksum's value, once the payload is read.
func (e *chunkEncoder) trailerValue() (string, error) {
	if e.value != nil {
		return e.value()
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], e.crc)
	return base64.StdEncoding.EncodeToString(sum[:]), nil
}

// encodedLength is the exact size of the framing of n payload bytes with the
// trailer name, so the upstream request carries a Content-Length.
func encodedLength(n int64, name string) int64 {
	var total int64
	for left := n; left > 0; {
		c := min(left, upstreamChunkSize)
		total += int64(len(strconv.FormatInt(c, 16))) + 2 + c + 2
		left -= c
	}
	return total + 3 + int64(len(name)+1+store.ChecksumHeaders[name]+2) + 2
}

var errBodyLonger = errors.New("request body longer than declared")

func (e *chunkEncoder) Read(p []byte) (int, error) {
	for {
		if len(e.pending) > 0 {
			n := copy(p, e.pending)
			e.pending = e.pending[n:]
			return n, nil
		}
		if e.done {
			return 0, io.EOF
		}
		if e.inChunk > 0 {
			if int64(len(p)) > e.inChunk {
				p = p[:e.inChunk]
			}
			n, err := e.src.Read(p)
			if n > 0 {
				if e.value == nil {
					e.crc = crc32.Update(e.crc, crc32.IEEETable, p[:n])
				}
				e.inChunk -= int64(n)
				e.remaining -= int64(n)
				e.payloadRead.Add(int64(n))
				if e.inChunk == 0 {
					e.pending = append(e.buf[:0], '\r', '\n')
				}
				return n, nil
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			if err == nil {
				continue
			}
			return 0, err
		}
		if e.remaining > 0 {
			c := min(e.remaining, upstreamChunkSize)
			e.inChunk = c
			b := strconv.AppendInt(e.buf[:0], c, 16)
			e.pending = append(b, '\r', '\n')
			continue
		}
		// The payload is complete: the source must now be at its end, which is
		// also when a verifying source has checked its trailer.
		var one [1]byte
		for {
			n, err := e.src.Read(one[:])
			if n > 0 {
				return 0, errBodyLonger
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return 0, err
			}
		}
		v, err := e.trailerValue()
		if err != nil {
			return 0, err
		}
		if len(v) != store.ChecksumHeaders[e.name] {
			return 0, errors.New("trailing checksum " + e.name + " has the wrong length")
		}
		last := append(e.buf[:0], "0\r\n"...)
		last = append(append(append(last, e.name...), ':'), v...)
		e.pending = append(last, "\r\n\r\n"...)
		e.checksum = store.ChecksumValue(e.name, v)
		e.done = true
	}
}
