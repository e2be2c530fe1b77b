package gateway

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/store"
)

// Buckets is the catalog's record of buckets: created (complete: nothing in
// it the catalog does not know) and deleted.
type Buckets interface {
	BucketCreated(ctx context.Context, bucket string) error
	BucketDeleted(ctx context.Context, bucket string) error
}

const maxResultBody = 1 << 20

// readResult reads a small success body (CopyObject, CompleteMultipartUpload)
// and puts it back for relaying. Both operations can answer 200 with an error
// document: that is not a success.
func readResult(resp *http.Response) ([]byte, *apiError) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResultBody))
	resp.Body.Close()
	setAnswer(resp, body)
	if err != nil {
		return nil, errStoreUnreached
	}
	if bytes.Contains(body, []byte("<Error>")) {
		return body, &apiError{Code: orDefault(xmlElement(body, "Code"), "InternalError"), Status: http.StatusInternalServerError,
			Message: orDefault(xmlElement(body, "Message"), "The store reported an error after accepting the request.")}
	}
	return body, nil
}

var errNoSuchUpload = newAPIError("NoSuchUpload", http.StatusNotFound,
	"The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.")

var errMalformedXML = newAPIError("MalformedXML", http.StatusBadRequest,
	"The XML you provided was not well-formed or did not validate against our published schema.")

var errInvalidPartOrder = newAPIError("InvalidPartOrder", http.StatusBadRequest,
	"The list of parts was not in ascending order. The parts list must be specified in order by part number.")

// completeDocument checks a CompleteMultipartUpload document fencegate may
// send: well-formed to its end, rooted at CompleteMultipartUpload, no deeper
// than its schema (root, Part, a Part's fields: 3 levels; 4 allowed), and
// naming at least one part, each PartNumber a number no smaller than the
// one before (MalformedXML, or InvalidPartOrder for a number out of order, as
// S3 answers). A number named again is sent on: ceph/s3-tests'
// test_multipart_resend_first_finishes_last lists part 1 twice and expects
// the upload published (RGW and SeaweedFS take the part as uploaded last).
// Anything else is refused before the lease: a store that reads the parts of
// a document of any root would publish the upload, and a document nested a
// hundred thousand levels deep costs the store long enough that the client
// gets no answer in time (issue 27's complete-deeply-nested).
func completeDocument(doc []byte) *apiError {
	const maxDepth = 4
	d := xml.NewDecoder(bytes.NewReader(doc))
	depth, roots, parts := 0, 0, 0
	last := int64(0)
	var path [maxDepth]string
	var number []byte // the PartNumber being read
	order := true
	for {
		tok, err := d.Token()
		if err == io.EOF {
			switch {
			case roots != 1 || depth != 0 || parts == 0:
				return errMalformedXML
			case !order:
				return errInvalidPartOrder
			}
			return nil
		}
		if err != nil {
			return errMalformedXML
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				if roots > 1 || el.Name.Local != "CompleteMultipartUpload" {
					return errMalformedXML
				}
			}
			if depth++; depth > maxDepth {
				return errMalformedXML
			}
			path[depth-1] = el.Name.Local
			if depth == 2 && el.Name.Local == "Part" {
				parts++
			}
		case xml.CharData:
			if depth == 3 && path[1] == "Part" && path[2] == "PartNumber" {
				number = append(number, el...)
			}
		case xml.EndElement:
			if depth == 3 && path[1] == "Part" && path[2] == "PartNumber" {
				// The whole element's text, however the decoder split it.
				n, err := strconv.ParseInt(strings.TrimSpace(string(number)), 10, 32)
				if err != nil {
					return errMalformedXML
				}
				if n < last {
					order = false
				}
				last, number = n, number[:0]
			}
			depth--
		}
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (s *Server) dbctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.leases.Config().DBTimeout)
}

// createUpload sends a CreateMultipartUpload under the protocol
// (lease.CreateUpload): its attempt is recorded before the store sees it
// (W1), and the object-to-be is tagged with the attempt id.
func (s *Server) createUpload(ctx *fasthttp.RequestCtx, r *request) *apiError {
	var resp *http.Response
	var u *upstream
	defer func() {
		if u != nil {
			u.finish(r) // after the relay: it ends the upstream request
		}
	}()
	err := s.leases.CreateUpload(context.Background(), r.bucket, r.key, func(id string) lease.Created {
		var e *apiError
		if u, e = s.buildUpstream(ctx, r); e != nil {
			return lease.Created{NotSent: true, Err: e}
		}
		u.req.Header.Set(store.AttemptHeader, id)
		if e := s.bindReservation(r, u, false); e != nil {
			return lease.Created{NotSent: true, Err: e} // reserve.go: the upload becomes the reservation's
		}
		var ans lease.Created
		if resp, e = s.roundTrip(ctx, r, u); e != nil {
			ans.Err = e
			return ans
		}
		ans.Status = resp.StatusCode
		if resp.StatusCode == http.StatusOK {
			body, e := readResult(resp)
			if e != nil {
				ans.AnswerErr = e
			}
			ans.UploadID = xmlElement(body, "UploadId")
		}
		return ans
	})
	var e *apiError
	switch {
	case errors.As(err, &e):
		drain(resp)
		return e
	case errors.Is(err, lease.ErrUploadUnrecorded):
		s.deps.Log.Error("could not record a multipart upload's id", "request_id", r.id, "err", err)
	case err != nil:
		s.deps.Log.Error("could not record a multipart upload", "request_id", r.id, "err", err)
		drain(resp)
		return errInternal
	}
	return s.relay(ctx, r, resp)
}

// abortUpload passes the abort through and records it.
func (s *Server) abortUpload(ctx *fasthttp.RequestCtx, r *request) *apiError {
	if e := s.forward(ctx, r); e != nil {
		return e
	}
	if ctx.Response.StatusCode()/100 == 2 {
		_ = s.leases.UploadAborted(context.Background(), string(ctx.QueryArgs().Peek("uploadId")))
	}
	return nil
}

// completeUpload publishes an upload under the key's lease. A retry of a
// Complete whose answer was lost gets the generation the first one became, and
// never makes a second (the repeat is answered by fencegate, not re-sent).
func (s *Server) completeUpload(ctx *fasthttp.RequestCtx, r *request) *apiError {
	uploadID := string(ctx.QueryArgs().Peek("uploadId"))
	if !utf8.ValidString(uploadID) || strings.IndexByte(uploadID, 0) >= 0 {
		// No store makes such an id, and PostgreSQL's text cannot hold it to
		// look it up.
		return errNoSuchUpload
	}
	a, tracked, err := s.leases.UploadByID(context.Background(), uploadID)
	if err != nil {
		return errInternal
	}
	if tracked && a.Bucket == r.bucket && a.Key == r.key && a.Published() {
		return s.completedAlready(ctx, r, a)
	}
	reserved, e := s.completeReservation(r, a, tracked) // reserve_multipart.go
	if e != nil {
		return e
	}
	u, e := s.buildUpstream(ctx, r)
	if e != nil {
		return e
	}
	defer u.finish(r)
	if e := completeDocument(u.body); e != nil {
		return e
	}
	if r.reservation != "" {
		if e := s.reservedPartsFit(r, reserved, uploadID, u.body); e != nil {
			return e
		}
	}
	w := keyWrite{
		WriteRequest: lease.WriteRequest{Kind: lease.KindComplete, DeclaredSize: -1,
			ClientConditional: hasClientCondition(r), OtherCondition: hasConditionBesideFence(r)},
		acknowledge: func(resp *http.Response) (lease.Landed, *apiError) {
			body, e := readResult(resp)
			if e != nil {
				return lease.Landed{}, e
			}
			setAnswer(resp, withElement(body, "Location", s.objectURL(r))) // the store's names the store
			ent := lease.Landed{ETag: store.TrimETag(xmlElement(body, "ETag")), Size: -1}
			// The answer has no size: ask the store (outside any transaction).
			hctx, cancel := context.WithTimeout(context.Background(), store.HeadTimeout)
			defer cancel()
			if obj, err := s.store.Head(hctx, r.bucket, r.key); err == nil && obj.Exists && obj.ETag == ent.ETag {
				ent.Size = obj.Size
			}
			return ent, nil
		},
	}
	if tracked {
		w.UploadAttempt = a.AttemptID
		w.Settled = func() (bool, error) {
			a, _, err := s.leases.UploadByID(context.Background(), uploadID)
			if err == nil && a.Published() {
				if e := s.completedAlready(ctx, r, a); e != nil {
					return false, e
				}
				return true, nil
			}
			return false, nil
		}
	}
	e = s.writeKey(ctx, r, u, w)
	if e == nil && r.reservation != "" && ctx.Response.StatusCode() < 300 {
		s.metrics.reservationsCommitted.Inc() // its generation committed the reservation
	}
	return e
}

// completedAlready answers a repeated Complete with the first one's result.
func (s *Server) completedAlready(ctx *fasthttp.RequestCtx, r *request, a lease.Upload) *apiError {
	if ctx.Request.Header.ContentLength() != 0 {
		ctx.SetConnectionClose() // its body (the part list) is not needed
	}
	var b []byte
	b = append(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<CompleteMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Location>`...)
	b = appendXMLEscaped(b, s.objectURL(r))
	b = append(b, "</Location><Bucket>"...)
	b = appendXMLEscaped(b, r.bucket)
	b = append(b, "</Bucket><Key>"...)
	b = appendXMLEscaped(b, r.key)
	b = append(b, "</Key><ETag>&quot;"...)
	b = appendXMLEscaped(b, a.ETag)
	b = append(b, "&quot;</ETag>"...)
	sums := s.uploadChecksums(r, a)
	for _, c := range sums {
		b = append(b, "<"+c.element+">"...)
		b = appendXMLEscaped(b, c.value)
		b = append(b, "</"+c.element+">"...)
	}
	b = append(b, "</CompleteMultipartUploadResult>"...)
	ctx.Response.Header.DisableNormalizing()
	ctx.SetStatusCode(http.StatusOK)
	ctx.SetContentType("application/xml")
	ctx.Response.Header.Set("x-amz-request-id", r.id)
	ctx.Response.Header.Set(generationHeader, strconv.FormatInt(a.Generation, 10))
	ctx.SetBody(b)
	return nil
}

// uploadChecksum is one checksum of a completed upload: the Complete's answer
// names it in an XML element (the store's first answer carries no checksum
// header, and neither does the repeat), the store's HEAD in a header.
type uploadChecksum struct{ element, header, value string }

// checksumElements are the Complete answer's checksum elements, by header.
var checksumElements = []struct{ header, element string }{
	{"x-amz-checksum-crc32", "ChecksumCRC32"}, {"x-amz-checksum-crc32c", "ChecksumCRC32C"},
	{"x-amz-checksum-crc64nvme", "ChecksumCRC64NVME"}, {"x-amz-checksum-sha1", "ChecksumSHA1"},
	{"x-amz-checksum-sha256", "ChecksumSHA256"}, {"x-amz-checksum-type", "ChecksumType"},
}

// uploadChecksums are the checksums the store keeps for a completed upload,
// for a repeated Complete's answer (the catalog keeps none): read with a HEAD
// in checksum mode, and used only when the key still holds this upload's
// bytes (its ETag and its attempt id). Otherwise, or when the HEAD fails,
// there are none and the answer is as before, ETag only.
func (s *Server) uploadChecksums(r *request, a lease.Upload) []uploadChecksum {
	hctx, cancel := context.WithTimeout(context.Background(), store.HeadTimeout)
	defer cancel()
	info, err := s.store.Head(hctx, r.bucket, r.key)
	if err != nil || !info.Exists ||
		info.ETag != a.ETag || info.AttemptID == "" || info.AttemptID != a.AttemptID {
		return nil
	}
	var out []uploadChecksum
	for _, c := range checksumElements {
		if v := info.Header.Get(c.header); v != "" {
			out = append(out, uploadChecksum{element: c.element, header: c.header, value: v})
		}
	}
	if len(out) == 1 && out[0].element == "ChecksumType" {
		return nil // a type without a checksum says nothing
	}
	return out
}
