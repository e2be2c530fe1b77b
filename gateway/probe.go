package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

// ProbeResult says which of the store's guarantees the write protocol relies on
// were proven at start-up (docs/DESIGN.md, W3 and W9).
type ProbeResult struct {
	// Bucket is where the probe wrote: fencegate's own, so ListBuckets does
	// not show it to a key granted every bucket (buckets.go).
	Bucket string
	Checks []ProbeCheck
	// Optional checks decide a cheaper way to send, never whether writes
	// are fenced: a failed one keeps the costlier way (PlainChecksums).
	Optional []ProbeCheck
	// KeepsBackslash: the store keeps `a\b` and "a/b" apart (keyname.go).
	KeepsBackslash bool
	// MarkerKeepsObject: writing the marker "p/" leaves the object "p" (and
	// the keys under "p/") as they were; SeaweedFS replaces the object with
	// its directory (lease.WriteRequest.KeysArePaths).
	MarkerKeepsObject bool
	// PlainChecksums: the store refuses a plain PUT whose body does not
	// match its x-amz-checksum-crc32 header or is cut short, so spooled
	// bodies may travel plain (forward.go, sendsPlain).
	PlainChecksums bool
	// HeaderWhitespace: how the store folds whitespace inside a signed
	// header value, so fencegate signs a value with a tab as it verifies.
	HeaderWhitespace sigv4.Whitespace
}

// ProbeCheck is one proven (or refuted) behaviour.
type ProbeCheck struct {
	Name string
	OK   bool
	Note string
}

// Fenced reports whether every check passed.
func (p ProbeResult) Fenced() bool {
	for _, c := range p.Checks {
		if !c.OK {
			return false
		}
	}
	return len(p.Checks) > 0
}

func (p ProbeResult) String() string {
	var b strings.Builder
	for i, c := range append(slices.Clip(p.Checks), p.Optional...) {
		mark := "ok"
		if !c.OK {
			mark = "FAILED"
		}
		if i >= len(p.Checks) {
			mark += ", optional"
		}
		fmt.Fprintf(&b, "%s: %s", c.Name, mark)
		if c.Note != "" {
			fmt.Fprintf(&b, " (%s)", c.Note)
		}
		b.WriteString("; ")
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// Probe proves, in bucket, that the store rejects a mismatched condition on
// each fenced operation (PUT, Complete, Copy, Delete) and refuses an aws-chunked
// body cut short. It writes only under the prefix fencegate-probe/ and removes
// what it wrote. The bucket stays: gateways starting together probe it at once.
func (s *Server) Probe(ctx context.Context, bucket string) (ProbeResult, error) {
	p := &prober{s: s, bucket: bucket, prefix: "fencegate-probe/" + lease.NewID() + "/"}
	if err := p.ensureBucket(ctx); err != nil {
		return ProbeResult{}, err
	}
	defer p.cleanup()
	res := ProbeResult{Bucket: bucket}
	add := func(name string, ok bool, note string) { res.Checks = append(res.Checks, ProbeCheck{name, ok, note}) }

	base := p.prefix + "base"
	etag, err := p.put(ctx, base, []byte("probe"))
	if err != nil {
		return res, err
	}
	st, _ := p.status(ctx, http.MethodPut, base, []byte("overwrite"), map[string]string{"If-None-Match": "*"}, "")
	add("PUT If-None-Match on an existing key", st == 412, statusNote(st))
	st, _ = p.status(ctx, http.MethodPut, base, []byte("overwrite"), map[string]string{"If-Match": `"0000"`}, "")
	add("PUT If-Match with a stale ETag", st == 412, statusNote(st))
	st, _ = p.status(ctx, http.MethodPut, p.prefix+"absent", []byte("x"), map[string]string{"If-Match": `"` + etag + `"`}, "")
	add("PUT If-Match on an absent key", st == 412 || st == 404, statusNote(st))

	dest := p.prefix + "copy-dest"
	if _, err := p.put(ctx, dest, []byte("destination")); err != nil {
		return res, err
	}
	copyHeaders := map[string]string{"If-None-Match": "*", "X-Amz-Copy-Source": "/" + bucket + "/" + base}
	st, _ = p.status(ctx, http.MethodPut, dest, nil, copyHeaders, "")
	add("CopyObject If-None-Match on an existing destination", st == 412, statusNote(st))
	copyHeaders = map[string]string{"If-Match": `"0000"`, "X-Amz-Copy-Source": "/" + bucket + "/" + base}
	st, _ = p.status(ctx, http.MethodPut, dest, nil, copyHeaders, "")
	add("CopyObject If-Match with a stale ETag on the destination", st == 412, statusNote(st))

	ok, note := p.completeFenced(ctx, base, map[string]string{"If-None-Match": "*"})
	add("CompleteMultipartUpload If-None-Match on an existing key", ok, note)
	ok, note = p.completeFenced(ctx, base, map[string]string{"If-Match": `"0000"`})
	add("CompleteMultipartUpload If-Match with a stale ETag", ok, note)

	st, _ = p.status(ctx, http.MethodDelete, base, nil, map[string]string{"If-Match": `"0000"`}, "")
	add("DeleteObject If-Match with a stale ETag", st == 412, statusNote(st))
	// fencegate deletes a key the catalog says is absent without a condition:
	// S3 answers that delete with success and changes nothing.
	st, _ = p.status(ctx, http.MethodDelete, p.prefix+"never-written", nil, nil, "")
	add("DeleteObject on an absent key", st == 204 || st == 200, statusNote(st))

	ok, note = p.truncated(ctx)
	add("aws-chunked body cut short is not published", ok, note)

	ok, note = p.plainChecked(ctx)
	res.Optional = append(res.Optional, ProbeCheck{"plain body not matching its x-amz-checksum-crc32, or cut short, is not published", ok, note})
	res.PlainChecksums = ok
	res.KeepsBackslash = p.keepsBackslash(ctx)
	res.MarkerKeepsObject = p.markerKeepsObject(ctx)
	var fold ProbeCheck
	res.HeaderWhitespace, fold = p.headerWhitespace(ctx)
	res.Optional = append(res.Optional, fold)
	p.s.ApplyProbe(res)
	return res, nil
}

// ApplyProbe makes the server send as res learnt of its store. Probe applies
// its own result; a result holds for every server in front of the same store.
func (s *Server) ApplyProbe(res ProbeResult) {
	s.probeBucket.Store(&res.Bucket)
	s.keepsBackslash.Store(res.KeepsBackslash)
	s.markerKeepsObject.Store(res.MarkerKeepsObject)
	s.plainChecksums.Store(res.PlainChecksums)
	s.store.SetHeaderWhitespace(res.HeaderWhitespace)
}

// headerWhitespace learns how the store folds the whitespace inside a
// signed header value (sigv4.Whitespace): a HEAD of an absent key with a tab
// in a metadata header, signed each way, answered 404 (not 403) by the store
// for the folding it verifies with. The check passes when one is found; the
// client's signer is left at it, or at spaces when the store takes neither.
func (p *prober) headerWhitespace(ctx context.Context) (sigv4.Whitespace, ProbeCheck) {
	check := ProbeCheck{Name: "a signed header value with a tab is verified by the store"}
	h := map[string]string{"X-Amz-Meta-Fencegate-Probe": "a\tb"}
	var notes []string
	for _, w := range []sigv4.Whitespace{sigv4.FoldSpaces, sigv4.FoldAllWhitespace} {
		p.s.store.SetHeaderWhitespace(w)
		st, _ := p.status(ctx, http.MethodHead, p.prefix+"whitespace", nil, h, "")
		if st == http.StatusNotFound {
			check.OK, check.Note = true, w.String()
			return w, check
		}
		notes = append(notes, w.String()+": "+statusNote(st))
	}
	p.s.store.SetHeaderWhitespace(sigv4.FoldSpaces)
	check.Note = strings.Join(notes, "; ")
	return sigv4.FoldSpaces, check
}

// plainChecked learns whether a spooled body may travel plain with its CRC32
// in a header (W9): the store stores a plain body whose checksum matches, and
// publishes nothing of one whose checksum does not match or that breaks off
// before its Content-Length.
func (p *prober) plainChecked(ctx context.Context) (bool, string) {
	body := []byte("fencegate plain checksum probe")
	good := crc32Value(body)
	if st, err := p.plainPut(ctx, p.prefix+"plain", bytes.NewReader(body), int64(len(body)), good); st != 200 {
		return false, "a plain PUT with its right x-amz-checksum-crc32: " + statusNote(st) + errNote(err)
	}
	key := p.prefix + "plain-mismatch"
	st, err := p.plainPut(ctx, key, bytes.NewReader(body), int64(len(body)), crc32Value([]byte("another body")))
	if st != 400 {
		return false, "a plain PUT with a mismatched x-amz-checksum-crc32: " + statusNote(st) + errNote(err)
	}
	if ok, note := p.absent(ctx, key); !ok {
		return false, "a plain PUT with a mismatched x-amz-checksum-crc32 " + note
	}
	const n = 256 << 10
	key = p.prefix + "plain-cut"
	p.plainPut(ctx, key, &cutReader{left: n / 2}, n, crc32Value(bytes.Repeat([]byte("x"), n)))
	time.Sleep(200 * time.Millisecond) // let the store finish with the cut request
	if ok, note := p.absent(ctx, key); !ok {
		return false, "a plain PUT cut short " + note
	}
	return true, ""
}

// plainPut sends body (n bytes declared) as a plain, unsigned-payload PUT with
// sum as its x-amz-checksum-crc32, as sendsPlain sends a spooled body.
func (p *prober) plainPut(ctx context.Context, key string, body io.Reader, n int64, sum string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, probeRequestTimeout)
	defer cancel()
	req, err := p.s.store.NewRequest(ctx, http.MethodPut, store.LevelObject, p.bucket, key, "")
	if err != nil {
		return 0, err
	}
	req.Body, req.ContentLength = io.NopCloser(body), n
	req.Header.Set("X-Amz-Checksum-Crc32", sum)
	p.written = append(p.written, key)
	resp, err := p.s.store.Send(req, unsignedPayload)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// absent reports whether key is not stored ("published N bytes" if it is).
func (p *prober) absent(ctx context.Context, key string) (bool, string) {
	obj, err := p.s.store.Head(ctx, p.bucket, key)
	if err != nil {
		return false, err.Error()
	}
	if obj.Exists {
		return false, fmt.Sprintf("was published (%d bytes)", obj.Size)
	}
	return true, ""
}

func errNote(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func crc32Value(b []byte) string { return crc32Header(crc32.ChecksumIEEE(b)) }

// keepsBackslash learns whether the store keeps `a\b` and "a/b" apart. A
// filer-backed store may read a backslash as a path separator; then keys with
// one are refused (keyname.go), so one stored object is never two keys.
func (p *prober) keepsBackslash(ctx context.Context) bool {
	if _, err := p.put(ctx, p.prefix+"fold\\x", []byte("fold")); err != nil {
		return false
	}
	st, _ := p.status(ctx, http.MethodHead, p.prefix+"fold/x", nil, nil, "")
	return st == http.StatusNotFound
}

// markerKeepsObject learns whether writing the marker "p/" leaves the object
// "p" that has keys under it: an object, a key under it, then the marker,
// and the object must still be there. A failed step proves nothing, and
// writes of such markers stay guarded (lease.WriteRequest.KeysArePaths).
func (p *prober) markerKeepsObject(ctx context.Context) bool {
	parent := p.prefix + "parent"
	for _, k := range []string{parent, parent + "/child", parent + "/"} {
		if _, err := p.put(ctx, k, []byte(k[len(parent):])); err != nil {
			return false
		}
	}
	st, _ := p.status(ctx, http.MethodHead, parent, nil, nil, "")
	return st == http.StatusOK
}

// FencingUnproven puts the gateway in the documented weaker mode: the store's
// fencing was not proven (why), so every keyed write logs a warning that it
// may not be protected against a stale writer.
func (s *Server) FencingUnproven(why string) { s.fencingUnproven.Store(&why) }

// noteUnfenced logs one line for a write made in the weaker mode.
func (s *Server) noteUnfenced(requestID, bucket, key, op string) {
	if why := s.fencingUnproven.Load(); why != nil {
		s.deps.Log.Warn("write not proven fenced: the store's conditional writes are unproven",
			"request_id", requestID, "bucket", bucket, "key", key, "op", op, "why", *why)
	}
}

// probeRequestTimeout is generous: a store's first write to a new bucket may
// have to allocate storage (SeaweedFS grows volumes) while it starts.
const probeRequestTimeout = 60 * time.Second

func statusNote(st int) string { return "store answered " + strconv.Itoa(st) }

type prober struct {
	s       *Server
	bucket  string
	prefix  string
	written []string
	uploads [][2]string
}

func (p *prober) ensureBucket(ctx context.Context) error {
	head, err := p.exchange(ctx, http.MethodHead, "", "", nil, nil)
	if err != nil {
		return fmt.Errorf("the store did not answer the probe (--store-endpoint): %w", err)
	}
	if head.status == 200 {
		return nil
	}
	a, err := p.exchange(ctx, http.MethodPut, "", "", nil, nil)
	if err != nil {
		return fmt.Errorf("probe bucket %s: create: %w", p.bucket, err)
	}
	if a.status != 200 && a.status != 409 {
		return fmt.Errorf("probe bucket %s: create answered %d%s", p.bucket, a.status, refusalOf(a.body))
	}
	return nil
}

// refusalOf is the store's error document in a probe's error: its code and
// message, and for a refusal of fencegate's own key where to look.
func refusalOf(doc []byte) string {
	code := xmlElement(doc, "Code")
	if code == "" {
		return ""
	}
	out := " " + code
	if m := xmlElement(doc, "Message"); m != "" {
		out += " (" + m + ")"
	}
	switch code {
	case "SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied":
		out += ": the store refuses fencegate's own key; check --store-access-key and --store-secret-key (and --store-region)"
	}
	return out
}

// answer is what the store said to one probe request.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// exchange sends one request and reads the store's answer. A 200 carrying an
// error document counts as a 500.
func (p *prober) exchange(ctx context.Context, method, key, query string, h map[string]string, body []byte) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, probeRequestTimeout)
	defer cancel()
	level := store.LevelObject
	if key == "" {
		level = store.LevelBucket
	}
	req, err := p.s.store.NewRequest(ctx, method, level, p.bucket, key, query)
	if err != nil {
		return answer{}, err
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	u := &upstream{req: req, cancel: cancel}
	u.setBody(body)
	if key != "" && method != http.MethodDelete && method != http.MethodHead {
		p.written = append(p.written, key)
	}
	resp, err := p.s.store.Send(req, u.payloadHash)
	if err != nil {
		return answer{}, err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header, body: b}
	if a.status == 200 && bytes.Contains(b, []byte("<Error>")) {
		a.status = 500
	}
	return a, nil
}

// status is exchange's status and body; 0 when the store did not answer.
func (p *prober) status(ctx context.Context, method, key string, body []byte, h map[string]string, query string) (int, []byte) {
	a, err := p.exchange(ctx, method, key, query, h, body)
	if err != nil {
		return 0, nil
	}
	return a.status, a.body
}

func (p *prober) put(ctx context.Context, key string, body []byte) (string, error) {
	a, err := p.exchange(ctx, http.MethodPut, key, "", nil, body)
	if err != nil {
		return "", err
	}
	if a.status != 200 {
		return "", fmt.Errorf("probe PUT answered %d", a.status)
	}
	return store.TrimETag(a.header.Get("ETag")), nil
}

func (p *prober) completeFenced(ctx context.Context, key string, cond map[string]string) (bool, string) {
	st, body := p.status(ctx, http.MethodPost, key, nil, nil, "uploads")
	uploadID := xmlElement(body, "UploadId")
	if st != 200 || uploadID == "" {
		return false, "could not start a multipart upload: " + statusNote(st)
	}
	p.uploads = append(p.uploads, [2]string{key, uploadID})
	part, err := p.exchange(ctx, http.MethodPut, key, "partNumber=1&uploadId="+uploadID, nil, []byte("part"))
	if err != nil {
		return false, err.Error()
	}
	doc := []byte("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>" + part.header.Get("ETag") + "</ETag></Part></CompleteMultipartUpload>")
	st, _ = p.status(ctx, http.MethodPost, key, doc, cond, "uploadId="+uploadID)
	return st == 412, statusNote(st)
}

var errProbeCut = errors.New("probe: body cut short on purpose")

type cutReader struct{ left int }

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, errProbeCut
	}
	n := min(len(p), c.left)
	for i := range p[:n] {
		p[i] = 'x'
	}
	c.left -= n
	return n, nil
}

// truncated sends an aws-chunked PUT whose body breaks off, as fencegate sends
// every object, and checks that the store publishes nothing.
func (p *prober) truncated(ctx context.Context) (bool, string) {
	key := p.prefix + "truncated"
	ctx2, cancel := context.WithTimeout(ctx, probeRequestTimeout)
	defer cancel()
	req, err := p.s.store.NewRequest(ctx2, http.MethodPut, store.LevelObject, p.bucket, key, "")
	if err != nil {
		return false, err.Error()
	}
	const n = 256 << 10
	enc := newChunkEncoder(&cutReader{left: n / 2}, n, "", nil)
	req.Body = io.NopCloser(enc)
	req.ContentLength = encodedLength(n, enc.name)
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(n))
	req.Header.Set("X-Amz-Trailer", enc.name)
	p.written = append(p.written, key)
	if resp, err := p.s.store.Send(req, unsignedTrailer); err == nil {
		resp.Body.Close()
	}
	time.Sleep(200 * time.Millisecond) // let the store finish with the cut request
	if ok, note := p.absent(ctx, key); !ok {
		return false, "the cut body " + note
	}
	return true, ""
}

func (p *prober) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, u := range p.uploads {
		p.status(ctx, http.MethodDelete, u[0], nil, nil, "uploadId="+u[1])
	}
	for _, k := range p.written {
		p.status(ctx, http.MethodDelete, k, nil, nil, "")
	}
}
