package badinput

import (
	"bytes"
	"strconv"
)

// chunkedPut is a PutObject of data sent as aws-chunked with chunk
// signatures (STREAMING-AWS4-HMAC-SHA256-PAYLOAD), chunk bytes per chunk.
// alter, when set, may change the frames (each chunk's header line, data and
// CRLF; the last one the final zero-length chunk) before they are joined.
// Content-Length is the length of what is sent, so the HTTP framing stays
// right and only the aws-chunked framing is broken; decoded is
// x-amz-decoded-content-length (-1: len(data)).
func (e *env) chunkedPut(key string, data []byte, chunk, decoded int, alter func(frames [][]byte) [][]byte) []byte {
	if decoded < 0 {
		decoded = len(data)
	}
	s := e.signer()
	target := e.path(key)
	hs := []hdr{
		{"Host", e.addr}, {"X-Amz-Date", s.date()}, {"X-Amz-Content-Sha256", streamingPayload},
		{"Content-Encoding", "aws-chunked"}, {"X-Amz-Decoded-Content-Length", strconv.Itoa(decoded)},
	}
	names := signedNames(hs)
	seed := s.signature("PUT", target, hs, names, streamingPayload)
	hs = append(hs, hdr{"Authorization", s.authorization(names, seed)})
	var frames [][]byte
	prev := seed
	for off := 0; ; off += chunk {
		part := data[min(off, len(data)):min(off+chunk, len(data))]
		sig := s.chunkSignature(prev, part)
		prev = sig
		f := []byte(strconv.FormatInt(int64(len(part)), 16) + ";chunk-signature=" + sig + "\r\n")
		f = append(f, part...)
		f = append(f, "\r\n"...)
		frames = append(frames, f)
		if len(part) == 0 {
			break
		}
	}
	if alter != nil {
		frames = alter(frames)
	}
	body := bytes.Join(frames, nil)
	hs = append(hs, contentLength(len(body)))
	return wire("PUT", target, hs, body)
}

// unsignedTrailerPut is a PutObject sent as aws-chunked without chunk
// signatures and with a trailing checksum (STREAMING-UNSIGNED-PAYLOAD-TRAILER),
// the form current AWS SDKs use by default; trailer is its trailer line.
func (e *env) unsignedTrailerPut(key string, data []byte, trailer string) []byte {
	target := e.path(key)
	var body []byte
	body = append(body, strconv.FormatInt(int64(len(data)), 16)+"\r\n"...)
	body = append(body, data...)
	body = append(body, "\r\n0\r\n"+trailer+"\r\n\r\n"...)
	hs := e.signed("PUT", target, unsignedTrailer,
		hdr{"Content-Encoding", "aws-chunked"}, hdr{"X-Amz-Decoded-Content-Length", strconv.Itoa(len(data))},
		hdr{"X-Amz-Trailer", "x-amz-checksum-crc32"}, contentLength(len(body)))
	return wire("PUT", target, hs, body)
}
