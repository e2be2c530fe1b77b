package gateway

import (
	"context"
	"encoding/xml"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/valyala/fasthttp"
	"golang.org/x/sync/errgroup"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

type deleteRequest struct {
	// XMLName is the document's root: anything but <Delete> is refused
	// (encoding/xml would read <Object>s under any root).
	XMLName xml.Name
	Quiet   bool `xml:"Quiet"`
	Objects []struct {
		Key       string `xml:"Key"`
		VersionID string `xml:"VersionId"`
		// ETag conditions the entry's delete (S3's conditional delete: the
		// entry's If-Match).
		ETag string `xml:"ETag"`
	} `xml:"Object"`
}

type deleteOutcome struct {
	key, version string
	code, msg    string // empty: deleted
	busy         bool
	// marker: the delete made or removed a delete marker, whose version id
	// is markerVersion (the store's x-amz-delete-marker and x-amz-version-id).
	marker        bool
	markerVersion string
}

const deleteWorkers = 8

// deleteObjects runs each key of a DeleteObjects as its own fenced delete under
// its own lease (a multi-object delete cannot carry a condition per key). No
// worker ever holds one lease while waiting for another, so two overlapping
// batches cannot deadlock: a first pass takes only free keys, a second waits
// (bounded) for the ones that were leased.
func (s *Server) deleteObjects(ctx *fasthttp.RequestCtx, r *request) *apiError {
	body, err := s.smallBody(ctx, r)
	if err != nil {
		return asAPIError(err)
	}
	var dr deleteRequest
	if err := xml.Unmarshal(body, &dr); err != nil || len(dr.Objects) == 0 || dr.XMLName.Local != "Delete" {
		return errMalformedXML
	}
	if len(dr.Objects) > 1000 {
		return newAPIError("MalformedXML", http.StatusBadRequest, "The request may contain at most 1000 keys.")
	}
	order := make([]int, len(dr.Objects))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return dr.Objects[order[a]].Key < dr.Objects[order[b]].Key })
	out := make([]deleteOutcome, len(dr.Objects))
	batch, cancelBatch := context.WithCancel(context.Background())
	defer cancelBatch()
	s.inflight.setCancel(r.inflightID, cancelBatch)
	r.batch = batch
	run := func(idx []int, wait bool) {
		var g errgroup.Group
		g.SetLimit(deleteWorkers)
		for _, i := range idx {
			g.Go(func() error {
				o := dr.Objects[i]
				out[i] = s.deleteOne(r, o.Key, o.VersionID, o.ETag, wait)
				return nil
			})
		}
		_ = g.Wait() // deleteOne reports per key in out, never an error
	}
	run(order, false)
	var busy []int
	for _, i := range order {
		if out[i].busy {
			busy = append(busy, i)
		}
	}
	if len(busy) > 0 {
		run(busy, true)
	}

	b := []byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
	for _, o := range out {
		if o.code == "" && dr.Quiet {
			continue
		}
		tag := "Deleted"
		if o.code != "" {
			tag = "Error"
		}
		b = append(b, "<"+tag+"><Key>"...)
		b = appendXMLEscaped(b, o.key)
		b = append(b, "</Key>"...)
		if o.version != "" {
			b = append(b, "<VersionId>"...)
			b = appendXMLEscaped(b, o.version)
			b = append(b, "</VersionId>"...)
		}
		if o.marker {
			b = append(b, "<DeleteMarker>true</DeleteMarker>"...)
			if o.markerVersion != "" {
				b = append(b, "<DeleteMarkerVersionId>"...)
				b = appendXMLEscaped(b, o.markerVersion)
				b = append(b, "</DeleteMarkerVersionId>"...)
			}
		}
		if o.code != "" {
			b = append(b, "<Code>"...)
			b = appendXMLEscaped(b, o.code)
			b = append(b, "</Code><Message>"...)
			b = appendXMLEscaped(b, o.msg)
			b = append(b, "</Message>"...)
		}
		b = append(b, "</"+tag+">"...)
	}
	b = append(b, "</DeleteResult>"...)
	ctx.Response.Header.DisableNormalizing()
	ctx.SetStatusCode(http.StatusOK)
	ctx.SetContentType("application/xml")
	ctx.Response.Header.Set("x-amz-request-id", r.id)
	ctx.SetBody(b)
	return nil
}

// deleteOne deletes one key (or one version of it) through the write
// protocol, as its own keyed write. An entry's etag conditions it: fencegate's
// fence on the key carries it to the store (lease.WriteRequest.EntryETag); a version's
// delete is unfenced, and carries it as its If-Match for the store to judge.
func (s *Server) deleteOne(r *request, key, version, etag string, wait bool) deleteOutcome {
	res := deleteOutcome{key: key, version: version}
	fail := func(e *apiError) deleteOutcome {
		res.code, res.msg = e.Code, e.Message
		return res
	}
	if e := s.checkKey(key); e != nil {
		return fail(e)
	}
	q := ""
	if version != "" {
		q = "versionId=" + url.QueryEscape(version)
	}
	uctx, cancel := context.WithCancel(r.batch)
	defer cancel()
	req, err := s.store.NewRequest(uctx, http.MethodDelete, store.LevelObject, r.bucket, key, q)
	if err != nil {
		return fail(errInternal)
	}
	u := &upstream{req: req, payloadHash: sigv4.EmptySHA256, cancel: cancel}
	if etag = strings.TrimSpace(etag); etag != "*" {
		etag = store.TrimETag(etag)
	}
	if etag != "" && version != "" {
		req.Header.Set("If-Match", quoteETag(etag))
	}
	o := s.keyedWrite(nil, r, u, keyWrite{
		WriteRequest: lease.WriteRequest{Kind: lease.KindDelete, Key: key, DeclaredSize: -1, NoWait: !wait,
			Version: version != "", EntryETag: etag},
		acknowledge: deleted})
	switch {
	case o.Busy:
		res.busy = true
		return res
	case o.e != nil:
		return fail(o.e)
	}
	body, _ := readResult(o.resp)
	if o.resp.StatusCode/100 != 2 {
		return fail(&apiError{Code: orDefault(xmlElement(body, "Code"), "InternalError"), Message: xmlElement(body, "Message")})
	}
	// As S3 reports each key: a delete without a version id in a versioned
	// bucket made a marker (DeleteMarker, DeleteMarkerVersionId); a delete of
	// a version that is a marker names it twice (VersionId and
	// DeleteMarkerVersionId).
	if strings.EqualFold(o.resp.Header.Get("X-Amz-Delete-Marker"), "true") {
		res.marker = true
		res.markerVersion = o.resp.Header.Get("X-Amz-Version-Id")
		if version != "" {
			res.markerVersion = version
		}
	}
	return res
}

// quoteETag is etag as a condition header carries it ("*" bare).
func quoteETag(etag string) string {
	if etag == "*" {
		return etag
	}
	return `"` + etag + `"`
}
