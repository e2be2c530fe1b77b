package sigv4

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
)

// payloadSource yields decoded payload bytes. last reports that the bytes
// returned end the payload and that every framing check (chunk and trailer
// signatures, lengths) passed; a source never returns the payload's final
// byte before it knows that.
type payloadSource interface {
	next(p []byte) (n int, last bool, err error)
}

// BodyReader yields the decoded payload and verifies it. It holds back the
// final byte(s) of the payload until every final check passed, so a reader
// that forwards what it reads never forwards a complete bad body: on a
// failed check Read returns the error (an *Error) before the last byte.
// Errors of the raw reader other than a premature end are passed through.
type BodyReader struct {
	auth    *Auth
	src     payloadSource
	chunked *chunkedDecoder

	algo   [ckCount]hash.Hash
	md5    hash.Hash
	active []hash.Hash
	store  [ckCount + 1]hash.Hash

	done bool
	err  error

	// Held here so a body costs as few allocations as it can: the plain
	// source, and the room finish reads sums into (through the hash
	// interface, a local array would escape).
	known plainKnown
	sum   [64]byte
}

// Body wraps the raw request body (as the HTTP server delivers it, already
// de-chunked if Transfer-Encoding was chunked) and returns a reader of the
// decoded, verified payload. It never reads past Content-Length.
func (a *Auth) Body(raw io.Reader) (*BodyReader, error) {
	if raw == nil {
		raw = eofReader{}
	}
	b := &BodyReader{auth: a}
	b.active = b.store[:0]
	use := func(c checksumAlgo) {
		if b.algo[c] == nil {
			b.algo[c] = c.newHash()
			b.active = append(b.active, b.algo[c])
		}
	}
	if a.Payload == PayloadSHA256 {
		use(ckSHA256)
	}
	if a.checksum.algo != ckNone {
		use(a.checksum.algo)
	}
	for c := ckCRC32; c < ckCount; c++ {
		if a.trailers.has(c) {
			use(c)
		}
	}
	if a.hasMD5 {
		b.md5 = md5.New()
		b.active = append(b.active, b.md5)
	}
	switch {
	case a.Payload.Chunked():
		b.chunked = newChunkedDecoder(a, raw)
		b.src = b.chunked
	case a.ContentLength >= 0:
		b.known = plainKnown{r: raw, remain: a.ContentLength}
		b.src = &b.known
	default:
		b.src = &plainStream{r: raw}
	}
	return b, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// DecodedLength is the payload length if known up front (Content-Length, or
// x-amz-decoded-content-length for aws-chunked bodies), else -1.
func (b *BodyReader) DecodedLength() int64 {
	if b.auth.Payload.Chunked() {
		return b.auth.DecodedContentLength
	}
	return b.auth.ContentLength
}

// Trailers returns the client's trailing headers (names lowercased, e.g.
// x-amz-checksum-crc32), without the trailer signature. Valid after io.EOF.
func (b *BodyReader) Trailers() []HeaderField {
	if b.chunked == nil || !b.done {
		return nil
	}
	return b.chunked.trailers
}

func (b *BodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.done {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, last, err := b.src.next(p)
	if err != nil {
		// Bytes read alongside an error are never yielded: the error may
		// be the verdict on them.
		b.err = err
		return 0, err
	}
	for _, h := range b.active {
		h.Write(p[:n])
	}
	if last {
		if err := b.finish(); err != nil {
			b.err = err
			return 0, err
		}
		b.done = true
		if n == 0 {
			return 0, io.EOF
		}
	}
	return n, nil
}

// finish runs the whole-payload checks; the source already checked framing,
// lengths and signatures.
func (b *BodyReader) finish() error {
	a := b.auth
	sum := &b.sum
	if a.Payload == PayloadSHA256 {
		got := b.algo[ckSHA256].Sum(sum[:0])
		if !bytes.Equal(got, a.payloadHash[:]) {
			return newErr(CodeXAmzContentSHA256Mismatch, http.StatusBadRequest,
				"The provided 'x-amz-content-sha256' header does not match what was computed.",
				Field{"ClientComputedContentSHA256", hex.EncodeToString(a.payloadHash[:])},
				Field{"S3ComputedContentSHA256", hex.EncodeToString(got)})
		}
	}
	if a.hasMD5 {
		got := b.md5.Sum(sum[:0])
		if !bytes.Equal(got, a.contentMD5[:]) {
			return newErr(CodeBadDigest, http.StatusBadRequest,
				"The Content-MD5 you specified did not match what we received.",
				Field{"ExpectedDigest", base64.StdEncoding.EncodeToString(a.contentMD5[:])},
				Field{"CalculatedDigest", base64.StdEncoding.EncodeToString(got)})
		}
	}
	if c := a.checksum; c.algo != ckNone {
		if !bytes.Equal(b.algo[c.algo].Sum(sum[:0]), c.b[:c.n]) {
			return errBadDigest(c.algo.upperName())
		}
	}
	if b.chunked != nil {
		for _, t := range b.chunked.trailers {
			c := checksumFromHeader(t.Name)
			want, ok := decodeChecksum(c, t.Value)
			if !ok {
				return errInvalidRequest("Value for %s trailing header is invalid.", c.headerName())
			}
			if !bytes.Equal(b.algo[c].Sum(sum[:0]), want.b[:want.n]) {
				return errBadDigest(c.upperName())
			}
		}
	}
	return nil
}

// plainKnown is a body of declared Content-Length. It counts bytes itself:
// a raw reader may report a plain io.EOF when the body is cut short.
type plainKnown struct {
	r      io.Reader
	remain int64
	eof    bool
}

func (s *plainKnown) next(p []byte) (int, bool, error) {
	if s.remain == 0 {
		return 0, true, nil
	}
	if s.eof {
		return 0, false, errIncompleteBody("You did not provide the number of bytes specified by the Content-Length HTTP header.")
	}
	if int64(len(p)) > s.remain {
		p = p[:s.remain]
	}
	n, err := s.r.Read(p)
	s.remain -= int64(n)
	if s.remain == 0 {
		return n, true, nil
	}
	if err == io.EOF {
		s.eof = true
		if n == 0 {
			return s.next(p)
		}
	} else if err != nil {
		return 0, false, err
	}
	return n, false, nil
}

// plainStream is a body without Content-Length (Transfer-Encoding:
// chunked): its end is only known at EOF, so it always keeps the last byte
// read in hand until then.
type plainStream struct {
	r       io.Reader
	held    byte
	hasHeld bool
	one     [1]byte
	err     error
}

func (s *plainStream) next(p []byte) (int, bool, error) {
	if s.err == nil {
		var n int
		var err error
		switch {
		case !s.hasHeld:
			n, err = s.r.Read(p)
			if n > 0 {
				s.held, s.hasHeld = p[n-1], true
				n--
			}
		case len(p) == 1:
			n, err = s.r.Read(s.one[:])
			if n == 1 {
				p[0], s.held = s.held, s.one[0]
			}
		default:
			p[0] = s.held
			n, err = s.r.Read(p[1:])
			if n > 0 {
				s.held = p[n]
			}
		}
		if err != nil {
			s.err = err
		}
		if n > 0 || err == nil {
			return n, false, nil
		}
	}
	if s.err != io.EOF {
		return 0, false, s.err
	}
	if s.hasHeld {
		s.hasHeld = false
		p[0] = s.held
		return 1, true, nil
	}
	return 0, true, nil
}
