package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

const (
	unsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	unsignedPayload = "UNSIGNED-PAYLOAD"
	// maxSmallBody bounds XML documents (DeleteObjects of 1,000 long keys is
	// about 1.1 MB).
	maxSmallBody = 8 << 20
)

// forwardQuery is the client's query string as sent, less its x-amz-*
// parameters: a presigned URL's signature, and headers hoisted into the query,
// which travel as headers (headers.go).
func forwardQuery(raw []byte, presignedV2 bool) string {
	if !presignedV2 && !bytes.Contains(bytes.ToLower(raw), []byte("amz")) {
		return string(raw)
	}
	var out []byte
	for _, part := range bytes.Split(raw, []byte{'&'}) {
		name, _, _ := bytes.Cut(part, []byte{'='})
		dec, err := url.QueryUnescape(string(name))
		if err != nil || strings.HasPrefix(strings.ToLower(dec), "x-amz-") {
			continue
		}
		if presignedV2 && (dec == "AWSAccessKeyId" || dec == "Signature" || dec == "Expires") {
			// A SigV2 URL's credentials, which fencegate's own V4 signature replaces.
			continue
		}
		if len(out) > 0 {
			out = append(out, '&')
		}
		out = append(out, part...)
	}
	return string(out)
}

// copyRequestHeaders carries the headers S3 acts on (forwardedHeader), each
// once with its merged value (headers.go). aws-chunked is dropped from
// Content-Encoding: it described the client's framing, which the gateway has
// decoded.
func copyRequestHeaders(dst http.Header, src *headerView, skip func(lower string) bool) {
	// Each header's value slice is cut from one allocation (capacity 1, so
	// that adding a value to one header cannot reach its neighbour's).
	var vals []string
	for _, f := range src.fields {
		if !forwardedHeader(f.name) || skip != nil && skip(f.name) {
			continue
		}
		val := f.value
		if f.name == "content-encoding" {
			val = stripAWSChunked(val)
			if val == "" {
				continue
			}
		}
		if len(vals) == cap(vals) {
			vals = make([]string, 0, len(src.fields))
		}
		vals = append(vals, val)
		dst[upstreamName(f.name)] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
}

func stripAWSChunked(v string) string {
	if !strings.Contains(strings.ToLower(v), "aws-chunked") {
		return v
	}
	var keep []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" && !strings.EqualFold(p, "aws-chunked") {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, ",")
}

// upstream is a request being sent to the store on a client's behalf.
type upstream struct {
	req         *http.Request
	payloadHash string
	guard       *bodyGuard    // the client's body, when it streams
	enc         *chunkEncoder // its upstream framing
	cancel      context.CancelFunc
	body        []byte // a small body, kept so the request can be sent again
	// spooled is an object body received whole before the lease (spool.go),
	// framed again for each sending with the same trailer.
	spooled *spooled
	// unsent is the spooled body's reader for a sending that has not been
	// handed to the store client yet: a write refused before it is sent (a
	// lease conflict, a wait run out) closes it in finish, or its hold on
	// the spool would never end. Once sent, the store client closes it.
	unsent io.Closer
	// plain: the spooled body travels as it is, its CRC32 in an
	// x-amz-checksum-crc32 header, not framed as aws-chunked (sendsPlain).
	plain        bool
	trailerName  string
	trailerValue trailerSource
	// declaredChecksum is the body checksum known before the store is asked,
	// as the catalog records it ("crc32:<base64>"): the one the client sent
	// as a header, or, for a spooled body, its trailer's or the CRC32
	// fencegate computed as it spooled it; "" for a streamed body without a
	// checksum header (its checksum is known once it has been sent).
	declaredChecksum string
	// unsigned: sent without fencegate's credentials (an anonymous read,
	// anonymous.go), so the store's own ACLs decide.
	unsigned bool
}

// replayable reports whether the request can be sent a second time: it has no
// streamed body (a streamed body is consumed by its one sending).
func (u *upstream) replayable() bool { return u.guard == nil }

// rewind readies a replayable request to be sent again.
func (u *upstream) rewind() {
	switch {
	case u.spooled != nil:
		u.sendSpooled()
	case len(u.body) > 0:
		u.req.Body = io.NopCloser(bytes.NewReader(u.body))
	}
}

// sendSpooled readies the spooled body for one sending: plain, its checksum
// in a header (u.plain), or framed as aws-chunked with its trailer as a
// streamed body is. Either way W9 holds: the store checks what it gets against
// the checksum and refuses a body cut short (the start-up probe proved it
// for the plain form before any body is sent so, probe.go).
func (u *upstream) sendSpooled() {
	if u.trailerValue == nil {
		// fencegate's own checksum was computed as the body was spooled.
		sum := u.spooled.checksum()
		u.trailerValue = func() (string, error) { return sum, nil }
	}
	body := u.spooled.reader()
	u.unsent = body
	if u.plain {
		u.enc = nil
		u.req.Body = body
		return
	}
	u.enc = newChunkEncoder(body, u.spooled.n, u.trailerName, u.trailerValue)
	u.req.Body = struct {
		io.Reader
		io.Closer
	}{u.enc, body}
}

// sendsPlain decides how a spooled body travels: plain with its checksum as a
// header when the probe proved the store checks a CRC32 header and refuses a
// plain body cut short, and the checksum is a CRC32 known now (fencegate's
// own, or the client's). The store then reads no aws-chunked framing and
// fencegate writes none (docs/COST.md). Any other checksum keeps the trailer.
func (s *Server) sendsPlain(u *upstream) bool {
	if !s.plainChecksums.Load() || u.trailerName != "x-amz-checksum-crc32" {
		return false
	}
	if u.trailerValue == nil {
		return true
	}
	_, err := u.trailerValue()
	return err == nil
}

// frame sets the headers that say how a body of n bytes travels (sendSpooled
// or a streamed body's encoder): its length, and either the checksum header
// or the aws-chunked encoding with the trailer it announces. The client's
// own Content-Encoding (gzip, say) is kept after aws-chunked.
func (u *upstream) frame(n int64) {
	h := u.req.Header
	var encodings []string
	for k, v := range h {
		if strings.EqualFold(k, "Content-Encoding") {
			encodings = append(encodings, v...)
			delete(h, k)
		}
	}
	if u.plain {
		sum, _ := u.trailerValue() // sendsPlain saw it known
		h.Set(u.trailerName, sum)
		u.req.ContentLength = n
		u.payloadHash = unsignedPayload
	} else {
		u.req.ContentLength = encodedLength(n, u.trailerName)
		h.Set("X-Amz-Decoded-Content-Length", strconv.FormatInt(n, 10))
		h.Set("X-Amz-Trailer", u.trailerName)
		encodings = append([]string{"aws-chunked"}, encodings...)
		u.payloadHash = unsignedTrailer
	}
	if len(encodings) > 0 {
		h["Content-Encoding"] = []string{strings.Join(encodings, ",")}
	}
}

// bodyComplete reports whether the store could have received a whole body: a
// streamed body whose final chunk and trailer were never sent cannot be
// published (W9).
func (u *upstream) bodyComplete() bool { return u.enc == nil || u.enc.done && len(u.enc.pending) == 0 }

// sentChecksum is the checksum the streamed body's trailer carried upstream
// ("crc32:<base64>"), once it was sent; "" before that or without a body.
func (u *upstream) sentChecksum() string {
	if u.enc == nil || !u.bodyComplete() {
		return ""
	}
	return u.enc.checksum
}

// forward sends an admitted request to the store and relays the answer.
func (s *Server) forward(ctx *fasthttp.RequestCtx, r *request) *apiError {
	u, e := s.buildUpstream(ctx, r)
	if e != nil {
		return e
	}
	defer u.finish(r)
	resp, e := s.roundTrip(ctx, r, u)
	if e != nil {
		return e
	}
	if (r.op.Name == "GetObject" || r.op.Name == "HeadObject") && resp.StatusCode == http.StatusOK && store.DirectoryEntry(r.key, resp.Header) {
		// SeaweedFS reads its own directory "d/" (keys under it, or left by
		// them) as an empty object that its listings do not show; S3 and
		// the catalog hold nothing there.
		resp.Body.Close()
		return errNoSuchKey
	}
	return s.relay(ctx, r, resp)
}

// finish cancels the upstream context unless a streamed answer still needs it
// (its body's Close cancels then), and ends the request's hold on its spooled
// body, sent or not: every exit of a keyed write gives its spool space back.
func (u *upstream) finish(r *request) {
	if r.out == nil {
		u.cancel()
	}
	if u.unsent != nil {
		u.unsent.Close()
		u.unsent = nil
	}
	if u.spooled != nil {
		u.spooled.done()
	}
}

// buildUpstream prepares the store request: path-style URL, the client's query
// (less presign parameters), its end-to-end headers, and its body decoded and
// verified (streamed for object data, read whole for small documents).
func (s *Server) buildUpstream(ctx *fasthttp.RequestCtx, r *request) (*upstream, *apiError) {
	uctx, cancel := context.WithCancel(context.Background())
	r.cancelUpstream = cancel
	s.inflight.setCancel(r.inflightID, cancel)
	query := forwardQuery(ctx.Request.URI().QueryString(), r.auth != nil && r.auth.Presigned && r.auth.SignatureV2)
	if r.op.ListsBuckets {
		query = "" // every bucket: fencegate pages what the key may see (buckets.go)
	}
	req, err := s.store.NewRequest(uctx, string(ctx.Method()), r.op.Level, r.bucket, r.key, query)
	if err != nil {
		cancel()
		return nil, errInternal
	}
	u := &upstream{req: req, payloadHash: sigv4.EmptySHA256, cancel: cancel, unsigned: r.anonymousRead}
	if r.op.Body == BodyStreamed {
		if e := s.streamedBody(ctx, r, u); e != nil {
			cancel()
			return nil, e
		}
		return u, nil
	}
	body, err := s.smallBody(ctx, r)
	if err != nil {
		cancel()
		return nil, asAPIError(err)
	}
	copyRequestHeaders(req.Header, r.hdr, nil)
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		// A read's body (verified all the same) is not sent on: S3 ignores
		// it, and the store's read connections carry none (store/conn.go).
		body = nil
	}
	u.setBody(body)
	return u, nil
}

func (u *upstream) setBody(body []byte) {
	if len(body) == 0 {
		u.req.Body, u.req.ContentLength, u.payloadHash = nil, 0, sigv4.EmptySHA256
		return
	}
	sum := sha256.Sum256(body)
	u.payloadHash = hex.EncodeToString(sum[:])
	u.body = body
	u.req.Body = io.NopCloser(bytes.NewReader(body))
	u.req.ContentLength = int64(len(body))
}

// roundTrip sends the request once. A client body that failed verification,
// stalled or ended early aborted the upstream request before its end: that
// error is the client's answer.
func (s *Server) roundTrip(ctx *fasthttp.RequestCtx, r *request, u *upstream) (*http.Response, *apiError) {
	var resp *http.Response
	var err error
	u.unsent = nil // the store client closes the body from here, on every path
	if u.unsigned {
		resp, err = s.store.SendUnsigned(u.req)
	} else {
		resp, err = s.store.Send(u.req, u.payloadHash)
	}
	if u.guard != nil {
		if complete := u.guard.stop(); !complete {
			ctx.SetConnectionClose()
		}
		if berr := u.guard.failure(); berr != nil {
			if resp != nil {
				resp.Body.Close()
			}
			return nil, bodyError(berr)
		}
	}
	if err != nil {
		s.deps.Log.Warn("store request failed", "request_id", r.id, "op", r.op.Name, "err", err)
		s.metrics.upstreamErrors.WithLabelValues(r.op.Name).Inc()
		return nil, errStoreUnreached
	}
	return resp, nil
}

// bodyError is the answer to a client body that failed its checks or did
// not arrive; its connection cannot be reused.
func bodyError(err error) *apiError {
	if errors.Is(err, errRequestTimeout) {
		return withClose(errRequestTimeout)
	}
	return withClose(asAPIError(err))
}

func withClose(e *apiError) *apiError {
	c := *e
	c.closeConn = true
	return &c
}

// smallBody reads and verifies a whole (small) request body.
func (s *Server) smallBody(ctx *fasthttp.RequestCtx, r *request) ([]byte, error) {
	cl := ctx.Request.Header.ContentLength()
	if cl == 0 {
		return nil, nil
	}
	if cl == -2 {
		// A GET or HEAD with neither Content-Length nor Transfer-Encoding:
		// there is no body on the wire, and fasthttp reads none. What the
		// signature says of the body (its hash, checksum or MD5) must still
		// be true of an empty one; nothing is read from the client, so
		// neither a stall guard nor body memory is needed.
		br, err := r.auth.Body(nil)
		if err != nil {
			return nil, err
		}
		if _, err := io.Copy(io.Discard, br); err != nil {
			return nil, withClose(asAPIError(err))
		}
		return nil, nil
	}
	br, err := r.auth.Body(ctx.RequestBodyStream())
	if err != nil {
		return nil, err
	}
	if n := br.DecodedLength(); n > maxSmallBody {
		return nil, withClose(errMaxMessageLength)
	}
	// Held whole: take its share of the body memory first (limits.go); a
	// request without a key, from the unverified share.
	take := s.takeBodyMemory
	if r.akey == nil || r.akey.ID == anonymousID {
		take = s.takeUnverifiedMemory
	}
	if e := take(ctx, br.DecodedLength()); e != nil {
		return nil, e
	}
	g := newBodyGuard(br, ctx.Conn(), s.cfg.BodyStallTimeout)
	body, err := io.ReadAll(io.LimitReader(g, maxSmallBody+1))
	g.stop()
	if err != nil {
		if errors.Is(err, errRequestTimeout) {
			return nil, withClose(errRequestTimeout)
		}
		return nil, withClose(asAPIError(err))
	}
	if len(body) > maxSmallBody {
		return nil, withClose(errMaxMessageLength)
	}
	return body, nil
}

// streamedBody sets up object data to go upstream as aws-chunked with a
// trailing checksum (see awschunked.go), verified on the way by sigv4: a
// PutObject body small enough is received whole into the spool first (before
// any lease), any other streams through.
func (s *Server) streamedBody(ctx *fasthttp.RequestCtx, r *request, u *upstream) *apiError {
	up := u.req
	br, err := r.auth.Body(ctx.RequestBodyStream())
	if err != nil {
		return withClose(asAPIError(err))
	}
	n := br.DecodedLength()
	if n < 0 {
		return withClose(errMissingContentLength)
	}
	// The client's own checksum, from a header or announced as a trailer, travels
	// as the upstream trailer; otherwise the gateway computes a CRC32.
	var trailerName string
	var trailerValue trailerSource
	for _, f := range r.hdr.fields {
		if _, ok := store.ChecksumHeaders[f.name]; ok {
			trailerName = f.name
			val := f.value
			trailerValue = func() (string, error) { return val, nil }
			u.declaredChecksum = store.ChecksumValue(f.name, f.value)
			break
		}
	}
	if trailerName == "" {
		if t := strings.ToLower(strings.TrimSpace(r.hdr.get("x-amz-trailer"))); t != "" {
			if _, ok := store.ChecksumHeaders[t]; ok {
				trailerName = t
				trailerValue = func() (string, error) {
					for _, f := range br.Trailers() {
						if strings.EqualFold(f.Name, t) {
							return strings.TrimSpace(f.Value), nil
						}
					}
					return "", &sigv4.Error{Code: "MalformedTrailerError", Status: 400, Message: "The request contained trailing data that was not well-formed."}
				}
			}
		}
	}
	if trailerName == "" {
		trailerName = "x-amz-checksum-crc32"
	}
	copyRequestHeaders(up.Header, r.hdr, func(lower string) bool {
		_, isChecksum := store.ChecksumHeaders[lower]
		return isChecksum
	})
	guard := newBodyGuard(br, ctx.Conn(), s.cfg.BodyStallTimeout)
	u.trailerName, u.trailerValue = trailerName, trailerValue
	if r.op.Spooled && s.spool.take(n) {
		body, err := s.spool.fill(guard, n)
		if complete := guard.stop(); !complete {
			ctx.SetConnectionClose()
		}
		if err != nil {
			if berr := guard.failure(); berr != nil {
				err = berr
			}
			return bodyError(err)
		}
		u.spooled = body
		u.plain = s.sendsPlain(u)
		u.sendSpooled()
		if u.declaredChecksum == "" {
			// The whole body is here, so is its checksum (the client's
			// trailer, or fencegate's own): the attempt records it before the
			// store is asked, and a takeover adopts on it, not on size alone.
			if v, err := u.trailerValue(); err == nil {
				u.declaredChecksum = store.ChecksumValue(u.trailerName, v)
			}
		}
	} else {
		u.guard = guard
		u.enc = newChunkEncoder(guard, n, trailerName, trailerValue)
		up.Body = io.NopCloser(u.enc)
	}
	u.frame(n)
	r.bytesIn = n
	return nil
}
