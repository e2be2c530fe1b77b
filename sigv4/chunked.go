package sigv4

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"strings"
)

// Limits that keep the decoder's memory fixed whatever the client declares.
const (
	maxChunkSize    = 16 << 20 // larger chunks are refused, not allocated
	rawBufSize      = 4096     // longest chunk-header or trailer line
	maxTrailerBytes = 16 << 10 // whole trailer section after the last chunk
	maxTrailers     = 16
)

var errLineTooLong = errors.New("line too long")

func errTruncated() *Error {
	return errIncompleteBody("The request body terminated unexpectedly.")
}

// rawReader is a small fixed buffer over the raw body for header and
// trailer lines; chunk data bypasses it. It never reads past remain.
type rawReader struct {
	r      io.Reader
	remain int64 // bytes left under Content-Length; -1 reads to EOF
	buf    []byte
	r0, r1 int
	err    error // sticky; io.EOF at the end of the raw body
}

func (s *rawReader) read(p []byte) (int, error) {
	if s.remain == 0 {
		return 0, io.EOF
	}
	if s.remain > 0 && int64(len(p)) > s.remain {
		p = p[:s.remain]
	}
	n, err := s.r.Read(p)
	if s.remain > 0 {
		s.remain -= int64(n)
		if err == io.EOF && s.remain > 0 {
			err = io.ErrUnexpectedEOF
		}
	}
	return n, err
}

func (s *rawReader) fill() {
	if s.r0 > 0 {
		s.r1 = copy(s.buf, s.buf[s.r0:s.r1])
		s.r0 = 0
	}
	for range 100 {
		n, err := s.read(s.buf[s.r1:])
		s.r1 += n
		if err != nil {
			s.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	s.err = io.ErrNoProgress
}

// line returns the next line without its "\n" or "\r\n"; it is valid until
// the next call. At the end of the body it returns what is left and the
// sticky error.
func (s *rawReader) line() ([]byte, error) {
	for {
		if i := bytes.IndexByte(s.buf[s.r0:s.r1], '\n'); i >= 0 {
			l := s.buf[s.r0 : s.r0+i]
			s.r0 += i + 1
			return bytes.TrimSuffix(l, []byte{'\r'}), nil
		}
		if s.r1-s.r0 >= len(s.buf) {
			return nil, errLineTooLong
		}
		if s.err != nil {
			l := s.buf[s.r0:s.r1]
			s.r0 = s.r1
			return bytes.TrimSuffix(l, []byte{'\r'}), s.err
		}
		s.fill()
	}
}

// data reads chunk data: first what the line buffer holds, then straight
// from the raw body into p.
func (s *rawReader) data(p []byte) (int, error) {
	n := copy(p, s.buf[s.r0:s.r1])
	s.r0 += n
	if n == len(p) || s.err != nil {
		if n == 0 {
			return 0, s.err
		}
		return n, nil
	}
	m, err := s.read(p[n:])
	if err != nil {
		s.err = err
	}
	if n+m == 0 {
		return 0, err
	}
	return n + m, nil
}

// chunkedDecoder decodes aws-chunked bodies, signed or not, with or
// without trailers, verifying the chunk-signature chain as it goes.
type chunkedDecoder struct {
	raw         rawReader
	a           *Auth
	signed      bool // chunk signatures
	trailerMode bool // a trailer section may follow the last chunk

	sha      hash.Hash // running hash of the current chunk (signed only)
	prevSig  [32]byte
	chunkSig [32]byte
	sum      [32]byte
	sts      []byte // hmac pad + string to sign

	remain   int64 // data bytes left in the current chunk
	inChunk  bool
	decoded  int64
	trailers []HeaderField
	trailBuf []byte // "name:value\n" lines, as the trailer signature covers them
}

func newChunkedDecoder(a *Auth, raw io.Reader) *chunkedDecoder {
	d := &chunkedDecoder{
		a:           a,
		signed:      a.Payload == PayloadStreamingSigned || a.Payload == PayloadStreamingSignedTrailer,
		trailerMode: a.Payload == PayloadStreamingSignedTrailer || a.Payload == PayloadStreamingUnsignedTrailer,
		prevSig:     a.seed,
	}
	d.raw = rawReader{r: raw, remain: a.ContentLength, buf: make([]byte, rawBufSize)}
	if d.signed {
		d.sha = sha256.New()
		d.sts = make([]byte, 64, 64+256)
	}
	return d
}

func (d *chunkedDecoder) next(p []byte) (int, bool, error) {
	if !d.inChunk {
		if err := d.header(); err != nil {
			return 0, false, err
		}
		if d.remain == 0 { // empty payload
			return 0, true, d.finish()
		}
	}
	if int64(len(p)) > d.remain {
		p = p[:d.remain]
	}
	n, err := d.raw.data(p)
	if n == 0 {
		if err == nil {
			return 0, false, nil
		}
		return 0, false, d.rawErr(err)
	}
	if d.signed {
		d.sha.Write(p[:n])
	}
	d.remain -= int64(n)
	d.decoded += int64(n)
	if d.remain > 0 {
		return n, false, nil
	}
	// The chunk is complete. Before its last byte leaves, check its
	// signature, and look ahead: if the next chunk is the final one, every
	// final check runs now, while these bytes are still held.
	if err := d.endChunk(); err != nil {
		return 0, false, err
	}
	if err := d.header(); err != nil {
		return 0, false, err
	}
	if d.remain == 0 {
		if err := d.finish(); err != nil {
			return 0, false, err
		}
		return n, true, nil
	}
	return n, false, nil
}

func (d *chunkedDecoder) rawErr(err error) error {
	if err == nil || err == io.EOF || err == io.ErrUnexpectedEOF {
		return errTruncated()
	}
	if err == errLineTooLong {
		return errInvalidRequest("aws-chunked line longer than %d bytes", rawBufSize)
	}
	return err
}

// header parses "<hex size>[;chunk-signature=<sig>]".
func (d *chunkedDecoder) header() error {
	line, err := d.raw.line()
	if err != nil {
		return d.rawErr(err)
	}
	sizePart, ext, _ := bytes.Cut(line, []byte{';'})
	sizePart = bytes.TrimSpace(sizePart)
	if len(sizePart) == 0 {
		return errInvalidRequest("aws-chunked chunk size is missing")
	}
	var size int64
	for _, c := range sizePart {
		v, ok := unhex(c)
		if !ok {
			return errInvalidRequest("aws-chunked chunk size is malformed")
		}
		size = size<<4 | int64(v)
		if size > maxChunkSize {
			return errInvalidRequest("aws-chunked chunk size exceeds the limit of %d bytes", maxChunkSize)
		}
	}
	if d.signed {
		sig, ok := bytes.CutPrefix(bytes.TrimSpace(ext), []byte("chunk-signature="))
		if !ok || len(sig) != 64 {
			return errInvalidRequest("aws-chunked chunk-signature is missing or malformed")
		}
		if _, err := hex.Decode(d.chunkSig[:], sig); err != nil {
			return errInvalidRequest("aws-chunked chunk-signature is malformed")
		}
		d.sha.Reset()
	}
	if dl := d.a.DecodedContentLength; dl >= 0 && d.decoded+size > dl {
		return errIncompleteBody("The decoded body is longer than x-amz-decoded-content-length.")
	}
	d.remain, d.inChunk = size, true
	return nil
}

// endChunk consumes the CRLF after chunk data and checks the signature.
func (d *chunkedDecoder) endChunk() error {
	line, err := d.raw.line()
	if err != nil {
		return d.rawErr(err)
	}
	if len(line) != 0 {
		return errInvalidRequest("aws-chunked chunk data is not followed by CRLF")
	}
	d.inChunk = false
	return d.checkChunkSig()
}

func (d *chunkedDecoder) checkChunkSig() error {
	if !d.signed {
		return nil
	}
	d.sha.Sum(d.sum[:0])
	sts := append(d.sts[:64], "AWS4-HMAC-SHA256-PAYLOAD\n"...)
	sts = d.appendScope(sts)
	sts = append(sts, EmptySHA256...)
	sts = append(sts, '\n')
	sts = hex.AppendEncode(sts, d.sum[:])
	d.sts = sts
	return d.verifyLink(errChunkSignature)
}

func (d *chunkedDecoder) appendScope(sts []byte) []byte {
	sts = append(sts, d.a.amzDate...)
	sts = append(sts, '\n')
	sts = append(sts, d.a.scope...)
	sts = append(sts, '\n')
	sts = hex.AppendEncode(sts, d.prevSig[:])
	return append(sts, '\n')
}

func (d *chunkedDecoder) verifyLink(mk func() *Error) error {
	mac := hmacPadded(&d.a.signingKey, d.sts)
	if subtle.ConstantTimeCompare(mac[:], d.chunkSig[:]) != 1 {
		return mk()
	}
	d.prevSig = d.chunkSig
	return nil
}

// finish runs after the final (empty) chunk's header: its signature, the
// trailer section up to the end of the body, and the decoded length.
func (d *chunkedDecoder) finish() error {
	d.inChunk = false
	if d.signed {
		d.sha.Reset()
		if err := d.checkChunkSig(); err != nil {
			return err
		}
	}
	var seen trailerSet
	sawSig := false
	budget := maxTrailerBytes
	for {
		line, err := d.raw.line()
		switch {
		case err == errLineTooLong:
			return errMalformedTrailer("a trailer line is longer than %d bytes", rawBufSize)
		case err == io.ErrUnexpectedEOF || (err == io.EOF && len(line) > 0):
			// A body cut inside the trailer section.
			return errTruncated()
		case err != nil && err != io.EOF:
			return err
		}
		if budget -= len(line) + 2; budget < 0 {
			return errMalformedTrailer("the trailer section is larger than %d bytes", maxTrailerBytes)
		}
		// Blank lines are the section's terminators; clients differ in how
		// many they send ("\n\r\n" after a trailer from minio-go).
		if len(line) > 0 {
			if e := d.trailerLine(line, &seen, &sawSig); e != nil {
				return e
			}
		}
		if err == io.EOF {
			break
		}
	}
	if d.a.Payload == PayloadStreamingSignedTrailer && !sawSig {
		return errMalformedTrailer("x-amz-trailer-signature is missing")
	}
	for c := ckCRC32; c < ckCount; c++ {
		if d.a.trailers.has(c) && !seen.has(c) {
			return errInvalidRequest("The %s trailer announced in x-amz-trailer was not sent.", c.headerName())
		}
	}
	if dl := d.a.DecodedContentLength; dl >= 0 && d.decoded != dl {
		return errIncompleteBody("The decoded body is shorter than x-amz-decoded-content-length.")
	}
	return nil
}

func (d *chunkedDecoder) trailerLine(line []byte, seen *trailerSet, sawSig *bool) *Error {
	if !d.trailerMode {
		return errMalformedTrailer("data follows the final chunk but %s has no trailer", d.a.Payload)
	}
	if *sawSig {
		return errMalformedTrailer("data follows x-amz-trailer-signature")
	}
	name, value, ok := bytes.Cut(line, []byte{':'})
	if !ok {
		return errMalformedTrailer("a trailer line has no ':'")
	}
	name, value = bytes.TrimSpace(name), bytes.TrimSpace(value)
	if d.signed && strings.EqualFold(string(name), "x-amz-trailer-signature") {
		*sawSig = true
		if len(value) != 64 {
			return errMalformedTrailer("x-amz-trailer-signature is malformed")
		}
		if _, err := hex.Decode(d.chunkSig[:], value); err != nil {
			return errMalformedTrailer("x-amz-trailer-signature is malformed")
		}
		sum := sha256.Sum256(d.trailBuf)
		sts := append(d.sts[:64], "AWS4-HMAC-SHA256-TRAILER\n"...)
		sts = d.appendScope(sts)
		sts = hex.AppendEncode(sts, sum[:])
		d.sts = sts
		if err := d.verifyLink(func() *Error {
			return newErr(CodeSignatureDoesNotMatch, 403,
				"The trailer signature we calculated does not match the signature you provided.")
		}); err != nil {
			return err.(*Error)
		}
		return nil
	}
	c := checksumFromHeader(string(name))
	if c == ckNone || !d.a.trailers.has(c) {
		return errInvalidRequest("The trailer %q was not announced in x-amz-trailer.", name)
	}
	if seen.has(c) || len(d.trailers) >= maxTrailers {
		return errMalformedTrailer("the trailer %q is repeated", name)
	}
	*seen |= 1 << c
	d.trailers = append(d.trailers, HeaderField{Name: c.headerName(), Value: string(value)})
	d.trailBuf = append(d.trailBuf, line...)
	d.trailBuf = append(d.trailBuf, '\n')
	return nil
}
