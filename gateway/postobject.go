package gateway

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

// POST Object: a browser-form upload (multipart/form-data) to a bucket,
// authenticated by the policy document its form carries and signed (sigv4's
// VerifyPost), not by its headers: admission lets it through to here. The
// fields before the file part are read (at most maxPostFields bytes), the
// policy verified and the key's grant checked; then the file part is spooled
// whole (spool.go: memory, else an unlinked file, under --spool-budget, taken
// as the bytes arrive) while content-length-range is enforced, and sent as a
// PutObject through the write protocol (keyedWrite), aws-chunked with a
// trailing checksum like every object body. Fields after the file part are ignored, as S3 does.

// maxPostFields bounds the bytes of a form before its file part (field
// names, values and part headers); they are held in memory, taken from the
// unverified share of --max-body-memory until the policy is verified
// (limits.go), then from the budget itself.
const maxPostFields = 64 << 10

// maxPostEpilogue is how much of a form after its file part is read and
// ignored so its connection can be kept; a longer one closes it.
const maxPostEpilogue = 64 << 10

// postSpoolWait is how long a form waits for each piece of spool space it
// takes as its file arrives.
const postSpoolWait = 2 * time.Second

var (
	errNotAForm = newAPIError("PreconditionFailed", http.StatusPreconditionFailed,
		"Bucket POST must be of the enclosure-type multipart/form-data")
	errMalformedPost = newAPIError("MalformedPOSTRequest", http.StatusBadRequest,
		"The body of your POST request is not well-formed multipart/form-data.")
	errPostFieldsTooLarge = newAPIError("MaxPostPreDataLengthExceededError", http.StatusBadRequest,
		"Your POST request fields preceding the upload file were too large.")
	errNoFile = &apiError{Code: "InvalidArgument", Status: http.StatusBadRequest,
		Message: "POST requires exactly one file upload per request.",
		Fields:  []sigv4.Field{{Name: "ArgumentName", Value: "file"}, {Name: "ArgumentValue", Value: "0"}}}
	errPostNoSpool = newAPIError("NotImplemented", http.StatusNotImplemented,
		"POST object uploads need the gateway's spool, which is off (--spool-max).")
	errMalformedTagging = newAPIError("MalformedXML", http.StatusBadRequest,
		"The XML you provided was not well-formed or did not validate against our published schema")
)

// preLimit fails a form whose bytes before the file part exceed left.
type preLimit struct {
	r    io.Reader
	left int64 // < 0: unlimited (the file part was reached)
}

func (p *preLimit) Read(b []byte) (int, error) {
	if p.left >= 0 {
		if p.left == 0 {
			return 0, errPostFieldsTooLarge
		}
		if int64(len(b)) > p.left {
			b = b[:p.left]
		}
	}
	n, err := p.r.Read(b)
	if p.left >= 0 {
		p.left -= int64(n)
	}
	return n, err
}

// postObject serves POST Object.
func (s *Server) postObject(ctx *fasthttp.RequestCtx, r *request) *apiError {
	mt, params, err := mime.ParseMediaType(r.hdr.get("content-type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return withClose(errNotAForm)
	}
	// Until its policy is verified the form is anyone's: its fields come
	// from the unverified share of body memory (limits.go).
	if e := s.takeUnverifiedMemory(ctx, maxPostFields); e != nil {
		return e
	}
	guard := newBodyGuard(ctx.RequestBodyStream(), ctx.Conn(), s.cfg.BodyStallTimeout)
	defer func() {
		if complete := guard.stop(); !complete {
			ctx.SetConnectionClose()
		}
	}()
	// Errors while reading the form: its rest is unread.
	formError := func(err error) *apiError {
		if berr := guard.failure(); berr != nil {
			return bodyError(berr)
		}
		var ae *apiError
		if errors.As(err, &ae) {
			return withClose(ae)
		}
		return withClose(errMalformedPost)
	}
	pre := &preLimit{r: guard, left: maxPostFields}
	mr := multipart.NewReader(pre, params["boundary"])
	var fields []sigv4.HeaderField
	var file *multipart.Part
	for file == nil {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			return withClose(errNoFile)
		}
		if err != nil {
			return formError(err)
		}
		name := p.FormName()
		if strings.EqualFold(name, "file") {
			file = p
			break
		}
		v, err := io.ReadAll(p)
		if err != nil {
			return formError(err)
		}
		if name != "" {
			fields = append(fields, sigv4.HeaderField{Name: name, Value: string(v)})
		}
	}
	fieldBytes := maxPostFields - pre.left
	pre.left = -1

	post, err := s.verifier.VerifyPost(&sigv4.PostRequest{Bucket: r.bucket, Fields: fields, Filename: file.FileName()})
	if err != nil {
		return withClose(asAPIError(err))
	}
	r.auth = post.Auth
	r.akey = s.keys.lookup(post.Auth.AccessKeyID)
	if r.akey == nil {
		return withClose(errAccessDenied)
	}
	// Verified: the fields read are held from the body memory authenticated
	// requests share, and the unverified share is given back.
	if e := s.takeBodyMemory(ctx, fieldBytes); e != nil {
		return e
	}
	s.releaseUnverifiedMemory(ctx)
	headers, e := postHeaders(post)
	if e != nil {
		return withClose(e)
	}
	reservation, _ := post.Get(reservationParam)
	perm := PermWrite
	if reservation != "" {
		// Authorized by its reservation, checked below; the key needs a
		// grant to reserve (or write) in the bucket.
		perm = PermReserve
	}
	if headers.Get("X-Amz-Acl") != "" || hasGrant(headers) {
		perm = PermAdmin // an ACL can make data public at the store
	}
	if !r.akey.allowed(perm, r.bucket) {
		return withClose(errAccessDenied)
	}
	r.key = post.Key
	if e := s.checkKey(r.key); e != nil {
		return withClose(e)
	}
	var reserved ReservedUpload
	if reservation != "" {
		if reserved, e = s.admitFormReservation(r, reservation, post); e != nil {
			return withClose(e) // reserve.go
		}
		r.reservation = reservation
	} else if e := s.refuseReservedKey(r); e != nil {
		if e != errReservationUnchecked {
			return withClose(e) // reserve.go
		}
		// The database cannot say now: the file first (a form cut short
		// gets its own 4xx), the key checked again before anything is sent.
		r.reservationDeferred = true
	}

	// The file, spooled whole and verified (its checksum field) before any
	// lease: a form cut short ends without its closing boundary, which the
	// multipart reader reports, and nothing is sent (W9).
	if s.spool == nil || s.spool.max <= 0 {
		return withClose(errPostNoSpool)
	}
	limit := s.spool.max
	if post.MaxLength >= 0 && post.MaxLength < limit {
		limit = post.MaxLength
	}
	if r.reservation != "" {
		// The reservation bounds the file whatever the form's policy says.
		for _, n := range []int64{reserved.ExactSize, reserved.MaxSize} {
			if n >= 0 && n < limit {
				limit = n
			}
		}
	}
	br, err := post.Auth.Body(file)
	if err != nil {
		return withClose(asAPIError(err))
	}
	body, err := s.spool.fillUpTo(br, limit, postSpoolWait)
	if err != nil {
		if errors.Is(err, errSpoolFull) {
			return withClose(errSlowDown)
		}
		if errors.Is(err, errBodyLonger) {
			return withClose(asAPIError(sigv4.ErrEntityTooLarge(limit+1, limit)))
		}
		var se *sigv4.Error
		if errors.As(err, &se) {
			return withClose(asAPIError(se))
		}
		return formError(err)
	}
	// What follows the file part is ignored; read a little of it so the
	// connection can be kept.
	_, _ = io.Copy(io.Discard, io.LimitReader(guard, maxPostEpilogue))
	n := body.n
	r.bytesIn = n
	if err := post.CheckLength(n); err != nil {
		body.done()
		return asAPIError(err)
	}
	if r.reservation != "" {
		if e := reserved.fits(n); e != nil {
			body.done()
			return e
		}
	}
	if r.reservationDeferred {
		if e := s.refuseReservedKey(r); e != nil {
			body.done()
			return e
		}
	}

	u, e := s.postUpstream(r, body, headers, post)
	if e != nil {
		return e
	}
	defer u.finish(r)
	checksum := ""
	if u.trailerValue != nil {
		v, _ := u.trailerValue()
		checksum = store.ChecksumValue(u.trailerName, v)
	}
	o := s.keyedWrite(ctx, r, u, keyWrite{
		WriteRequest: lease.WriteRequest{Kind: lease.KindPut, Key: r.key, DeclaredSize: n, Checksum: checksum, Reservation: r.reservation},
		prepare: func(u *upstream, t lease.Try) *apiError {
			u.req.Header.Set(store.AttemptHeader, t.AttemptID)
			return s.bindReservation(r, u, t.ReservationBound) // reserve.go: a form under a reservation is bound as a PUT is
		},
		acknowledge: func(resp *http.Response) (lease.Landed, *apiError) {
			return lease.Landed{ETag: store.TrimETag(resp.Header.Get("ETag")), Size: n}, nil
		},
	})
	switch {
	case o.e != nil:
		return o.e
	case o.resp.StatusCode/100 != 2:
		return s.relay(ctx, r, o.resp)
	}
	etag := o.resp.Header.Get("ETag")
	version := o.resp.Header.Get("X-Amz-Version-Id")
	drain(o.resp)
	if r.reservation != "" {
		s.metrics.reservationsCommitted.Inc() // its generation committed the reservation
	}
	s.postAnswer(ctx, r, post, etag, version, o.Generation)
	return nil
}

// postUpstream is the PutObject the file goes to the store as: the form's
// object fields as headers, the spooled file with its checksum (the form's
// x-amz-checksum-*, else a CRC32 fencegate computes) as a spooled PutObject
// body travels (forward.go, sendSpooled).
func (s *Server) postUpstream(r *request, body *spooled, headers http.Header, post *sigv4.PostObject) (*upstream, *apiError) {
	uctx, cancel := context.WithCancel(context.Background())
	r.cancelUpstream = cancel
	s.inflight.setCancel(r.inflightID, cancel)
	req, err := s.store.NewRequest(uctx, http.MethodPut, store.LevelObject, r.bucket, r.key, "")
	if err != nil {
		cancel()
		body.done()
		return nil, errInternal
	}
	u := &upstream{req: req, payloadHash: unsignedTrailer, cancel: cancel, spooled: body}
	for k, v := range headers {
		req.Header[k] = v
	}
	u.trailerName = "x-amz-checksum-crc32"
	for _, f := range post.Fields {
		if _, ok := store.ChecksumHeaders[f.Name]; ok {
			val := strings.TrimSpace(f.Value)
			u.trailerName, u.trailerValue = f.Name, func() (string, error) { return val, nil }
		}
	}
	u.plain = s.sendsPlain(u)
	u.sendSpooled()
	u.frame(body.n)
	return u, nil
}

// postHeaders maps the form's fields to the PutObject's headers: the fields
// S3 documents for POST Object that the allow-list lets through as form
// fields (tostore.go: object properties, encryption, storage class,
// x-amz-meta-*), acl as x-amz-acl, and tagging (an XML document in a form) as
// x-amz-tagging's query form. Checksums travel as the trailer. Every other
// field, signed by the policy or not (x-amz-copy-source, a directive, a
// grant), stays at the gateway: a form stores its own file and nothing else.
func postHeaders(post *sigv4.PostObject) (http.Header, *apiError) {
	h := http.Header{}
	metadata := 0
	for _, f := range post.Fields {
		metadata += userMetadataSize(f.Name, f.Value)
		switch name := f.Name; {
		case name == "acl":
			h.Set("X-Amz-Acl", f.Value)
		case name == "tagging":
			q, err := taggingQuery(f.Value)
			if err != nil {
				return nil, errMalformedTagging
			}
			h.Set("X-Amz-Tagging", q)
		case reachesStore(name, asFormField):
			h[upstreamName(name)] = []string{f.Value}
		}
	}
	if metadata > maxUserMetadata {
		return nil, metadataTooLarge(metadata)
	}
	for name, values := range h {
		for _, v := range values {
			if e := storeHeaderRefusal("form field", name, v); e != nil {
				return nil, e
			}
		}
	}
	return h, nil
}

func hasGrant(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-amz-grant-") {
			return true
		}
	}
	return false
}

// taggingQuery turns a form's <Tagging> document into x-amz-tagging's
// URL-query form.
func taggingQuery(doc string) (string, error) {
	var t struct {
		XMLName xml.Name `xml:"Tagging"`
		Tags    []struct {
			Key   string `xml:"Key"`
			Value string `xml:"Value"`
		} `xml:"TagSet>Tag"`
	}
	if err := xml.Unmarshal([]byte(doc), &t); err != nil {
		return "", err
	}
	var b strings.Builder
	for i, tag := range t.Tags {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(tag.Key))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(tag.Value))
	}
	return b.String(), nil
}

// postAnswer answers a landed upload as S3 does: a 303 to
// success_action_redirect (with bucket, key and ETag), else
// success_action_status 200 (empty), 201 (a PostResponse document) or, by
// default and for any other value, 204.
func (s *Server) postAnswer(ctx *fasthttp.RequestCtx, r *request, post *sigv4.PostObject, etag, version string, gen int64) {
	h := &ctx.Response.Header
	h.DisableNormalizing()
	h.Set("x-amz-request-id", r.id)
	h.Set("ETag", etag)
	if version != "" {
		h.Set("x-amz-version-id", version)
	}
	if gen > 0 {
		h.Set(generationHeader, strconv.FormatInt(gen, 10))
	}
	location := s.objectURL(r)
	h.Set("Location", location)
	redirect, ok := post.Get("success_action_redirect")
	if !ok {
		redirect, _ = post.Get("redirect")
	}
	if u, err := url.Parse(redirect); redirect != "" && err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		sep := "?"
		if strings.Contains(redirect, "?") {
			sep = "&"
		}
		h.Set("Location", redirect+sep+"bucket="+url.QueryEscape(r.bucket)+"&key="+url.QueryEscape(r.key)+"&etag="+url.QueryEscape(etag))
		ctx.SetStatusCode(http.StatusSeeOther)
		return
	}
	status, _ := post.Get("success_action_status")
	switch status {
	case "200":
		ctx.SetStatusCode(http.StatusOK)
	case "201":
		ctx.SetStatusCode(http.StatusCreated)
		ctx.SetContentType("application/xml")
		b := []byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<PostResponse><Location>")
		b = appendXMLEscaped(b, location)
		b = append(b, "</Location><Bucket>"...)
		b = appendXMLEscaped(b, r.bucket)
		b = append(b, "</Bucket><Key>"...)
		b = appendXMLEscaped(b, r.key)
		b = append(b, "</Key><ETag>"...)
		b = appendXMLEscaped(b, etag)
		ctx.SetBody(append(b, "</ETag></PostResponse>"...))
	default:
		ctx.SetStatusCode(http.StatusNoContent)
	}
}
