package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fencegate/fencegate/internal/chaos/history"
	"github.com/fencegate/fencegate/internal/stack"
)

// generationHeader is where a gateway says which generation a write became.
const generationHeader = "x-fencegate-generation"

// recorder keeps the history: every operation with its invocation and return
// times on one clock, the campaign's start.
type recorder struct {
	start time.Time
	next  atomic.Int64
	mu    sync.Mutex
	ops   []history.Op
}

func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

// begin starts an operation's record; finish completes and keeps it.
func (r *recorder) begin(client, gateway int, key string, kind history.Kind) history.Op {
	return history.Op{ID: r.next.Add(1), Client: client, Gateway: gateway, Key: key, Kind: kind, Invoke: r.now()}
}

func (r *recorder) finish(op history.Op) {
	op.Return = r.now()
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []history.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]history.Op(nil), r.ops...)
}

// clients hands out one SDK client per gateway process (its URL): a client
// per operation would leave idle keep-alive connections behind each time.
type clients struct {
	key stack.Endpoint
	mu  sync.Mutex
	by  map[string]*s3.Client
}

func (c *clients) get(url string) *s3.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.by[url]; ok {
		return cl
	}
	ep := c.key
	ep.URL = url
	cl := ep.S3Client(func(o *s3.Options) {
		o.RetryMaxAttempts = 1 // the history needs every try's own outcome
		o.HTTPClient = &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	})
	c.by[url] = cl
	return cl
}

// worker is one client of the workload: its own random sequence (from the
// seed), its own values, and the last value it read per key (for If-Match).
type worker struct {
	id       int
	c        *Campaign
	rng      *rand.Rand
	seq      int
	lastRead map[string]string
	// viaBalancer: the worker sends through the load balancer (the cluster
	// stack's HAProxy), its operations' gateway history.Balancer.
	viaBalancer bool
	failing     int // operations in a row that failed or went unanswered
}

// finish records op as the worker's own.
func (w *worker) finish(op history.Op) {
	if op.Outcome == history.Failed || op.Outcome == history.Unknown {
		w.failing++
	} else {
		w.failing = 0
	}
	w.c.rec.finish(op)
}

// weighted is a choice and how often it is drawn against the others.
type weighted struct {
	name   string
	weight int
}

// pickWeighted draws one of choices' names, each in proportion to its weight.
func pickWeighted(rng *rand.Rand, choices []weighted) string {
	total := 0
	for _, c := range choices {
		total += c.weight
	}
	n := rng.IntN(total)
	for _, c := range choices {
		if n < c.weight {
			return c.name
		}
		n -= c.weight
	}
	return choices[0].name
}

// opKinds and their weights in the workload.
var opWeights = []weighted{
	{"get", 22}, {"head", 8}, {"put", 25}, {"put-if-match", 8}, {"put-if-none-match", 5},
	{"copy", 6}, {"multipart", 5}, {"delete", 10}, {"delete-objects", 5},
}

func (w *worker) pick() string { return pickWeighted(w.rng, opWeights) }

func (w *worker) newValue(prefix string) string {
	w.seq++
	return fmt.Sprintf("%s%d-%d", prefix, w.id, w.seq)
}

// run issues operations until ctx ends; an operation is never abandoned half
// way (its own deadline is the HTTP client's).
func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		gi, url := w.c.pickGateway(w.rng)
		if w.viaBalancer {
			// Always there: while HAProxy is down its clients' connections
			// are refused (a definite failure), or cut under way (unknown).
			gi, url = history.Balancer, w.c.gatewayURL(history.Balancer)
		}
		if url == "" {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		cl := w.c.clients.get(url)
		bucket, key := w.c.pickKey(w.rng)
		switch w.pick() {
		case "get":
			w.get(cl, gi, bucket, key)
		case "head":
			w.head(cl, gi, bucket, key)
		case "put":
			w.put(cl, gi, bucket, key, history.NoCond)
		case "put-if-match":
			w.put(cl, gi, bucket, key, history.IfMatch)
		case "put-if-none-match":
			w.put(cl, gi, bucket, key, history.IfNoneMatch)
		case "copy":
			w.copy(cl, gi, bucket, key)
		case "multipart":
			w.multipart(cl, gi, bucket, key)
		case "delete":
			w.delete(cl, gi, bucket, key)
		case "delete-objects":
			_, other := w.c.pickKey(w.rng)
			w.deleteObjects(cl, gi, bucket, key, other)
		}
		pause := time.Duration(w.rng.IntN(20)) * time.Millisecond
		if w.viaBalancer {
			// HAProxy answers 503 at once while it sees no gateway up (their
			// /readyz fails while the store or the database is away), and
			// refuses connections while it restarts: back off a little
			// rather than fill the history with instant failures.
			pause += min(time.Duration(w.failing)*20*time.Millisecond, 300*time.Millisecond)
		}
		sleep(ctx, pause)
	}
}

func reqCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 90*time.Second)
}

func (w *worker) get(cl *s3.Client, gi int, bucket, key string) {
	op := w.c.rec.begin(w.id, gi, bucket+"/"+key, history.Read)
	ctx, cancel := reqCtx()
	defer cancel()
	out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err == nil {
		b, rerr := io.ReadAll(out.Body)
		out.Body.Close()
		if rerr != nil {
			op.Outcome, op.Detail = history.Failed, "body: "+rerr.Error()
		} else {
			op.Outcome, op.Value, op.ETag = history.OK, valueOfBody(b), strings.Trim(aws.ToString(out.ETag), `"`)
			w.lastRead[op.Key] = op.Value
		}
	} else {
		w.readError(&op, err)
	}
	w.finish(op)
}

func (w *worker) head(cl *s3.Client, gi int, bucket, key string) {
	op := w.c.rec.begin(w.id, gi, bucket+"/"+key, history.Read)
	ctx, cancel := reqCtx()
	defer cancel()
	out, err := cl.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err == nil {
		op.ETag = strings.Trim(aws.ToString(out.ETag), `"`)
		if v, ok := w.c.etags.value(op.ETag); ok {
			op.Outcome, op.Value = history.OK, v
			w.lastRead[op.Key] = v
		} else {
			op.Outcome, op.Value = history.OK, "etag:"+op.ETag
		}
		op.Detail = "HEAD"
	} else {
		w.readError(&op, err)
		op.Detail = "HEAD " + op.Detail
	}
	w.finish(op)
}

// readError records a failed read: 404 NoSuchKey is an answer (absent); any
// other failure tells nothing and is left out of the check.
func (w *worker) readError(op *history.Op, err error) {
	status, code := errorStatus(err)
	op.Detail = fmt.Sprintf("%d %s", status, code)
	if status == http.StatusNotFound && (code == "NoSuchKey" || code == "NotFound" || code == "") {
		op.Outcome = history.Absent
		return
	}
	op.Outcome = history.Failed
	op.Detail += " " + shortErr(err)
}

func (w *worker) put(cl *s3.Client, gi int, bucket, key string, cond history.Cond) {
	v := w.newValue(prefixFor(key, "c"))
	body := bodyOf(v)
	w.c.etags.add(v, md5Hex(body))
	crc := crc32Base64(body)
	op := w.c.rec.begin(w.id, gi, bucket+"/"+key, history.Write)
	op.Value = v
	in := &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(body), ChecksumCRC32: &crc}
	switch cond {
	case history.IfMatch:
		if cv := w.lastRead[op.Key]; cv != "" && w.c.etags.etag(cv) != "" {
			op.Cond, op.CondValue = cond, cv
			in.IfMatch = aws.String(`"` + w.c.etags.etag(cv) + `"`)
		}
	case history.IfNoneMatch:
		op.Cond = cond
		in.IfNoneMatch = aws.String("*")
	}
	ctx, cancel := reqCtx()
	defer cancel()
	out, err := cl.PutObject(ctx, in)
	if err == nil {
		op.ETag = strings.Trim(aws.ToString(out.ETag), `"`)
		op.Gen = generationOf(out.ResultMetadata)
	}
	writeOutcome(&op, err)
	w.finish(op)
}

func (w *worker) copy(cl *s3.Client, gi int, bucket, key string) {
	src := w.c.sources[w.rng.IntN(len(w.c.sources))]
	op := w.c.rec.begin(w.id, gi, bucket+"/"+key, history.Write)
	op.Value = src
	ctx, cancel := reqCtx()
	defer cancel()
	out, err := cl.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: &key, CopySource: aws.String(sourceBucket + "/" + src)})
	if err == nil {
		if out.CopyObjectResult != nil {
			op.ETag = strings.Trim(aws.ToString(out.CopyObjectResult.ETag), `"`)
		}
		op.Gen = generationOf(out.ResultMetadata)
	}
	writeOutcome(&op, err)
	op.Detail = "copy " + op.Detail
	w.finish(op)
}

// multipart creates an upload with one part and completes it, trying the
// Complete again (up to twice) while its outcome is unknown. The tries are one
// operation: the value is published at most once, by whichever try landed.
func (w *worker) multipart(cl *s3.Client, gi int, bucket, key string) {
	v := w.newValue(prefixFor(key, "m"))
	body := bodyOf(v)
	w.c.etags.add(v, multipartETag(body))
	ctx, cancel := reqCtx()
	defer cancel()
	up, err := cl.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return // no write yet: nothing for the register
	}
	part, err := cl.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: &key, UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader(body)})
	if err != nil {
		return
	}
	op := w.c.rec.begin(w.id, gi, bucket+"/"+key, history.Write)
	op.Value = v
	in := &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}}
	var details []string
	sawUnknown, allAnswered := false, true
	for try := 0; try < 3; try++ {
		out, err := cl.CompleteMultipartUpload(ctx, in)
		try := op
		if err == nil {
			try.ETag = strings.Trim(aws.ToString(out.ETag), `"`)
			try.Gen = generationOf(out.ResultMetadata)
		}
		writeOutcome(&try, err)
		allAnswered = allAnswered && try.Answered
		details = append(details, string(try.Outcome)+" "+try.Detail)
		if try.Outcome == history.OK {
			op = try
			sawUnknown = false
			break
		}
		if try.Outcome == history.Unknown {
			sawUnknown = true
		} else if !sawUnknown {
			op = try // a definite failure with no earlier unknown try
			break
		}
		// An earlier try may have landed: the next try may answer its
		// generation (fencegate answers a repeated Complete so), or be refused.
		time.Sleep(time.Duration(200+w.rng.IntN(800)) * time.Millisecond)
		if cur := w.c.gatewayURL(gi); cur != "" {
			cl = w.c.clients.get(cur)
		}
	}
	if sawUnknown {
		op.Outcome = history.Unknown
	}
	op.Answered = allAnswered
	op.Detail = "complete: " + strings.Join(details, "; ")
	w.finish(op)
}

func (w *worker) delete(cl *s3.Client, gi int, bucket, key string) {
	op := w.c.rec.begin(w.id, gi, bucket+"/"+key, history.Delete)
	ctx, cancel := reqCtx()
	defer cancel()
	out, err := cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key})
	if err == nil {
		op.Gen = generationOf(out.ResultMetadata)
	}
	writeOutcome(&op, err)
	w.finish(op)
}

// deleteObjects deletes two keys of a bucket in one request: each entry is an
// operation of its own, with the request's times. DeleteObjects answers no
// generation per key. A key XML 1.0 cannot carry is deleted on its own
// instead: the SDK writes U+FFFD for its control character, so the request
// would name another key (S3 itself could not be told it).
func (w *worker) deleteObjects(cl *s3.Client, gi int, bucket, a, b string) {
	var keys []string
	for _, k := range []string{a, b} {
		switch {
		case !xmlCarries(k):
			w.delete(cl, gi, bucket, k)
		case len(keys) == 0 || keys[0] != k:
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	start := w.c.rec.now()
	ctx, cancel := reqCtx()
	defer cancel()
	objs := make([]types.ObjectIdentifier, len(keys))
	for i, k := range keys {
		objs[i] = types.ObjectIdentifier{Key: aws.String(k)}
	}
	out, err := cl.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket, Delete: &types.Delete{Objects: objs}})
	perKey := map[string]history.Op{}
	for _, k := range keys {
		op := history.Op{ID: w.c.rec.next.Add(1), Client: w.id, Gateway: gi, Key: bucket + "/" + k, Kind: history.Delete, Invoke: start}
		writeOutcome(&op, err)
		op.Detail = "DeleteObjects " + op.Detail
		if err == nil {
			// An entry the answer names neither deleted nor refused has
			// an outcome nobody told.
			op.Outcome, op.Detail = history.Unknown, "DeleteObjects: the answer does not name the key"
		}
		perKey[k] = op
	}
	if err == nil {
		for _, d := range out.Deleted {
			op := perKey[aws.ToString(d.Key)]
			op.Outcome, op.Detail = history.OK, "DeleteObjects deleted"
			perKey[aws.ToString(d.Key)] = op
		}
		for _, e := range out.Errors {
			op := perKey[aws.ToString(e.Key)]
			op.Outcome = entryOutcome(aws.ToString(e.Code))
			op.Detail = "DeleteObjects error " + aws.ToString(e.Code)
			perKey[aws.ToString(e.Key)] = op
		}
	}
	for _, k := range keys {
		w.finish(perKey[k])
	}
}

// xmlCarries reports whether every character of s is one XML 1.0 allows
// (tab, newline, return, U+0020-U+D7FF, U+E000-U+FFFD, above U+FFFF).
func xmlCarries(s string) bool {
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r > 0xD7FF && r < 0xE000 || r == 0xFFFE || r == 0xFFFF {
			return false
		}
	}
	return true
}

// entryOutcome classifies a DeleteObjects entry's error code.
func entryOutcome(code string) history.Outcome {
	switch code {
	case "SlowDown", "ConditionalRequestConflict", "AccessDenied", "NoSuchKey":
		return history.Failed
	}
	return history.Unknown
}

// writeOutcome classifies a write's answer. A 412 says the condition was
// false; 409 ConditionalRequestConflict, 503 SlowDown (fencegate answers it
// only when nothing was or can be written: a busy key, a refused fence) and
// other 4xx are definite failures; every other failure, a 5xx or no answer,
// leaves the outcome unknown, except a connection that was never made.
func writeOutcome(op *history.Op, err error) {
	if err == nil {
		op.Outcome, op.Detail = history.OK, "ok"
		op.Answered = op.Gateway != history.Balancer
		return
	}
	status, code := errorStatus(err)
	op.Answered = status != 0 && op.Gateway != history.Balancer
	op.Detail = fmt.Sprintf("%d %s", status, code)
	switch {
	case status == http.StatusPreconditionFailed:
		op.Outcome = history.PreconditionFailed
	case status == http.StatusConflict, status == http.StatusServiceUnavailable && code == "SlowDown":
		op.Outcome = history.Failed
	case status >= 400 && status < 500:
		op.Outcome = history.Failed
	case status == 0 && neverConnected(err):
		op.Outcome = history.Failed
		op.Detail += " " + shortErr(err)
	default:
		op.Outcome = history.Unknown
		if status == 0 || code == "" {
			// No answer, or one without an S3 error (a 200 whose document
			// the SDK could not read): the error itself says what.
			op.Detail += " " + shortErr(err)
		}
	}
}

// errorStatus is the HTTP status and S3 code of an SDK error (0 without an
// answer).
func errorStatus(err error) (int, string) {
	var re *smithyhttp.ResponseError
	status := 0
	if errors.As(err, &re) && re.Response != nil {
		status = re.Response.StatusCode
	}
	var ae smithy.APIError
	code := ""
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	return status, code
}

// neverConnected: the request never reached the gateway (its process was
// down), so it cannot have had an effect.
func neverConnected(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 160 {
		s = s[len(s)-160:]
	}
	return s
}

// generationOf reads x-fencegate-generation from an SDK answer.
func generationOf(md middleware.Metadata) int64 {
	raw, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response)
	if !ok || raw == nil {
		return 0
	}
	g, _ := strconv.ParseInt(raw.Header.Get(generationHeader), 10, 64)
	return g
}
