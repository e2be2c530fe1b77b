package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate/internal/stack"
)

const (
	opGET       = "GET"
	opPUT       = "PUT"
	opMultipart = "MULTIPART" // CreateMultipartUpload, UploadPart x4, Complete
	opPUTHot    = "PUT1KEY"   // every client PUTs the same key: writers of one key queue
	opPUTHot4   = "PUT4KEYS"  // client i PUTs key i%hotKeys: a few hot keys, each with its queue
	hotKeys     = 4
	partSize    = 64 << 20
	partCount   = 4
	bucket      = "fencebench"
)

// transport is shared by every target: the client's own cost is identical.
var transport = &http.Transport{
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConns:        512,
	MaxIdleConnsPerHost: 128,
	IdleConnTimeout:     5 * time.Minute,
	DisableCompression:  true,
	WriteBufferSize:     64 << 10,
	ReadBufferSize:      64 << 10,
}

var (
	httpClient = &http.Client{Transport: transport}
	signer     = v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
)

// s3c sends raw, UNSIGNED-PAYLOAD SigV4 requests to one target.
type s3c struct {
	target
	creds aws.Credentials
}

func newS3c(t target) *s3c {
	return &s3c{target: t, creds: aws.Credentials{AccessKeyID: t.AccessKey, SecretAccessKey: t.SecretKey}}
}

// do sends one request; the response body is read into buf-sized chunks and
// discarded (or kept, up to 64 KiB, when keep is set: XML answers).
func (c *s3c) do(ctx context.Context, method, path, query string, body io.Reader, size int64, buf []byte, keep bool) (*http.Response, []byte, int64, error) {
	return c.doWith(ctx, method, path, query, nil, body, size, buf, keep)
}

// doWith is do with these request headers besides the signature's.
func (c *s3c) doWith(ctx context.Context, method, path, query string, hdr map[string]string, body io.Reader, size int64, buf []byte, keep bool) (*http.Response, []byte, int64, error) {
	u := c.URL + path
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, nil, 0, err
	}
	if body != nil {
		req.ContentLength = size
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	if err := signer.SignHTTP(ctx, c.creds, req, "UNSIGNED-PAYLOAD", "s3", c.Region, time.Now()); err != nil {
		return nil, nil, 0, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, nil, 0, err
	}
	defer resp.Body.Close()
	var kept []byte
	var n int64
	for {
		m, rerr := resp.Body.Read(buf)
		n += int64(m)
		if (keep || resp.StatusCode >= 300) && len(kept) < 64<<10 {
			kept = append(kept, buf[:m]...)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return resp, kept, n, rerr
		}
	}
	if resp.StatusCode >= 300 {
		return resp, kept, n, fmt.Errorf("%s %s: %s: %.300s", method, path, resp.Status, kept)
	}
	return resp, kept, n, nil
}

func (c *s3c) put(ctx context.Context, key string, data []byte, buf []byte) error {
	_, _, _, err := c.do(ctx, "PUT", "/"+bucket+"/"+key, "", bytes.NewReader(data), int64(len(data)), buf, false)
	return err
}

func (c *s3c) get(ctx context.Context, key string, want int64, buf []byte) error {
	_, _, n, err := c.do(ctx, "GET", "/"+bucket+"/"+key, "", nil, 0, buf, false)
	if err == nil && n != want {
		err = fmt.Errorf("GET %s: %d bytes, want %d", key, n, want)
	}
	return err
}

func (c *s3c) createBucket(ctx context.Context) error {
	resp, kept, _, err := c.do(ctx, "PUT", "/"+bucket, "", nil, 0, make([]byte, 4096), false)
	if err != nil && resp != nil && resp.StatusCode == 409 && strings.Contains(string(kept), "BucketAlready") {
		return nil
	}
	return err
}

// multipart uploads partCount parts of data (one after another), then completes.
func (c *s3c) multipart(ctx context.Context, key string, data []byte, buf []byte) error {
	path := "/" + bucket + "/" + key
	_, body, _, err := c.do(ctx, "POST", path, "uploads=", nil, 0, buf, true)
	if err != nil {
		return err
	}
	var created struct{ UploadId string }
	if err := xml.Unmarshal(body, &created); err != nil || created.UploadId == "" {
		return fmt.Errorf("CreateMultipartUpload: no UploadId in %.300s", body)
	}
	id := urlEscape(created.UploadId)
	var done strings.Builder
	done.WriteString("<CompleteMultipartUpload>")
	for n := 1; n <= partCount; n++ {
		q := "partNumber=" + strconv.Itoa(n) + "&uploadId=" + id
		resp, _, _, err := c.do(ctx, "PUT", path, q, bytes.NewReader(data), int64(len(data)), buf, false)
		if err != nil {
			return err
		}
		fmt.Fprintf(&done, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>", n, xmlEscape(resp.Header.Get("ETag")))
	}
	done.WriteString("</CompleteMultipartUpload>")
	doc := done.String()
	_, body, _, err = c.do(ctx, "POST", path, "uploadId="+id, strings.NewReader(doc), int64(len(doc)), buf, true)
	if err != nil {
		return err
	}
	if bytes.Contains(body, []byte("<Error>")) { // 200 with an error body
		return fmt.Errorf("CompleteMultipartUpload: %.300s", body)
	}
	return nil
}

func urlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || strings.IndexByte("-_.~", ch) >= 0 {
			b.WriteByte(ch)
		} else {
			fmt.Fprintf(&b, "%%%02X", ch)
		}
	}
	return b.String()
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// cell is one workload: an operation on objects of one size at one concurrency.
type cell struct {
	op   string
	size int64
	conc int
}

func (c cell) String() string { return fmt.Sprintf("%s %s c=%d", c.op, sizeLabel(c.size), c.conc) }

// sample is one measured run of a cell against one target.
type sample struct {
	ops, errors                  int
	bytes                        int64
	elapsed                      time.Duration
	p50, p99                     time.Duration
	cpu, storeCPU, dbCPU, client float64 // seconds: gateway (or store for direct), store, PostgreSQL, this client
	dbWrites                     int64   // PostgreSQL write transactions
	firstErr                     error
	notify                       *notifySample // the notification cell's delivery (notifybench.go)
}

func (s sample) opsPerS() float64 { return float64(s.ops) / s.elapsed.Seconds() }
func (s sample) mibPerS() float64 { return float64(s.bytes) / (1 << 20) / s.elapsed.Seconds() }

// fail counts a failed operation, keeping the first error.
func (s *sample) fail(err error) {
	s.errors++
	if s.firstErr == nil {
		s.firstErr = err
	}
}

// setLatencies sets p50 and p99 from the operations' latencies (sorting them).
func (s *sample) setLatencies(lats []time.Duration) {
	slices.Sort(lats)
	if len(lats) > 0 {
		s.p50 = lats[(len(lats)-1)*50/100]
		s.p99 = lats[(len(lats)-1)*99/100]
	}
}

// getKeys is how many objects of a size GET reads: one per client, at most 32
// (seeded before round 1).
func getKeys(conc int) int { return min(conc, 32) }

// runCell runs c against t for about dur: each of c.conc workers starts
// operations until dur has passed (at least one each), and the cell's time is
// until the last one finished.
func runCell(ctx context.Context, t target, pg procGroups, c cell, dur time.Duration, payload []byte) sample {
	cl := newS3c(t)
	lats := make([][]time.Duration, c.conc)
	var mu sync.Mutex
	var s sample
	xid0 := pg.xids()
	cpu0, store0, db0, client0 := groupCPU(t.pgid), groupCPU(pg.store), groupCPU(pg.db), selfCPU()
	hookFrom := 0
	if c.op == opPUTNotify {
		hookFrom = hook.count()
	}
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for w := 0; w < c.conc; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			data := payload[:min(c.size, partSize)] // multipart sends partSize parts
			for n := 0; n == 0 || time.Now().Before(deadline); n++ {
				if ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				var err error
				switch c.op {
				case opGET:
					err = cl.get(ctx, fmt.Sprintf("get/%d/%d", c.size, w%getKeys(c.conc)), c.size, buf)
				case opPUT:
					err = cl.put(ctx, fmt.Sprintf("put/%s/%d/%d", t.name, c.size, w), data, buf)
				case opPUTHot:
					err = cl.put(ctx, fmt.Sprintf("hot/%s/%d", t.name, c.size), data, buf)
				case opPUTHot4:
					err = cl.put(ctx, fmt.Sprintf("hot4/%s/%d/%d", t.name, c.size, w%hotKeys), data, buf)
				case opReserve, opReserveComplete:
					err = cl.reservePut(ctx, fmt.Sprintf("resv/%d/%d", c.size, w), data, buf, c.op == opReserveComplete)
				case opPUTNotify:
					err = cl.putNotify(ctx, w, data, buf)
				case opMultipart:
					err = cl.multipart(ctx, fmt.Sprintf("mpu/%s/%d", t.name, w), data, buf)
				}
				lat := time.Since(t0)
				mu.Lock()
				if err != nil {
					s.fail(err)
				} else {
					s.ops++
					s.bytes += c.size
					lats[w] = append(lats[w], lat)
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	s.elapsed = time.Since(start)
	s.cpu = groupCPU(t.pgid) - cpu0
	s.storeCPU = groupCPU(pg.store) - store0
	s.dbCPU = groupCPU(pg.db) - db0
	s.client = selfCPU() - client0
	s.dbWrites = pg.xids() - xid0
	s.setLatencies(slices.Concat(lats...))
	if c.op == opPUTNotify {
		ns := drainNotify(ctx, hookFrom, s.ops, start)
		s.notify = &ns
	}
	return s
}

// selfCPU is this process's user+system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// seed writes the objects GET cells read, straight to the store.
func seed(ctx context.Context, direct target, cells []cell, payload []byte) error {
	cl := newS3c(direct)
	if err := cl.createBucket(ctx); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	keys := map[int64]int{}
	for _, c := range cells {
		if c.op == opGET {
			keys[c.size] = max(keys[c.size], getKeys(c.conc))
		}
	}
	for size, n := range keys {
		for i := 0; i < n; i++ {
			if err := cl.put(ctx, fmt.Sprintf("get/%d/%d", size, i), payload[:size], buf); err != nil {
				return err
			}
		}
	}
	return nil
}

// repeatReader yields n bytes cycling through data, without holding them.
type repeatReader struct {
	data []byte
	left int64
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n := copy(p, r.data[r.off:])
	r.off = (r.off + n) % len(r.data)
	r.left -= int64(n)
	return n, nil
}

// streamResult is one big transfer through fencegate with its memory.
type streamResult struct {
	op              string
	size            int64
	secs            float64
	idleKiB, hwmKiB int64
	cpuSecs         float64
	rssAfterKiB     int64
}

// streamRSS PUTs and then GETs one object of size through t, reading the
// gateway's VmRSS before and VmHWM (its peak since start) after each. It runs
// before any other load, so the peak is the streaming's own.
func streamRSS(ctx context.Context, t target, pid int, size int64, payload []byte) ([]streamResult, error) {
	cl := newS3c(t)
	idle, err := stack.ProcStatusKiB(pid, "VmRSS")
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 256<<10)
	var out []streamResult
	for _, op := range []string{opPUT, opGET} {
		cpu0 := groupCPU(t.pgid)
		t0 := time.Now()
		if op == opPUT {
			_, _, _, err = cl.do(ctx, "PUT", "/"+bucket+"/stream", "", &repeatReader{data: payload, left: size}, size, buf, false)
		} else {
			err = cl.get(ctx, "stream", size, buf)
		}
		if err != nil {
			return nil, err
		}
		r := streamResult{op: op, size: size, secs: time.Since(t0).Seconds(), idleKiB: idle, cpuSecs: groupCPU(t.pgid) - cpu0}
		if r.hwmKiB, err = stack.ProcStatusKiB(pid, "VmHWM"); err != nil {
			return nil, err
		}
		r.rssAfterKiB, _ = stack.ProcStatusKiB(pid, "VmRSS")
		out = append(out, r)
	}
	return out, nil
}
