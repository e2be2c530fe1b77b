package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/badinput"
	"github.com/fencegate/fencegate/internal/chaos/history"
)

// Faults that act as clients: a PUT abandoned mid-body, writes straight at
// the store.

// cutPut sends a signed PUT's headers and half its body over a raw
// connection and closes it: a client gone mid-body. Its outcome is unknown to
// the client; the campaign settles it from the attempts (there should be
// none: an incomplete body is never sent on).
func (c *Campaign) cutPut(rng *rand.Rand) {
	gi, base := c.pickGateway(rng)
	if base == "" {
		return
	}
	bucket, key := c.pickKey(rng)
	v := fmt.Sprintf("%s%d-%d", prefixFor(key, "c"), 2000+gi, rng.Uint32())
	body := bodyOf(v)
	c.etags.add(v, md5Hex(body))
	op := c.rec.begin(2000, gi, bucket+"/"+key, history.Write)
	op.Value = v
	defer func() { c.rec.finish(op) }()
	op.Outcome, op.Detail = history.Unknown, "client went away mid-body"

	u, err := url.Parse(base)
	if err != nil {
		op.Outcome, op.Detail = history.Failed, "gateway URL: "+err.Error()
		return
	}
	u.Path = "/" + bucket + "/" + key // escaped as a client would (the key has '%', ' ' and U+0001)
	req, _ := http.NewRequest(http.MethodPut, u.String(), nil)
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Length", strconv.Itoa(len(body)))
	req.Header.Set("X-Amz-Checksum-Crc32", crc32Base64(body))
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	creds := aws.Credentials{AccessKeyID: c.stack.client.AccessKey, SecretAccessKey: c.stack.client.SecretKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
		op.Outcome, op.Detail = history.Failed, "sign: "+err.Error()
		return
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		op.Outcome, op.Detail = history.Failed, "dial: "+err.Error()
		return
	}
	defer conn.Close()
	var head bytes.Buffer
	fmt.Fprintf(&head, "PUT %s HTTP/1.1\r\nHost: %s\r\n", u.EscapedPath(), u.Host)
	for name, vals := range req.Header {
		for _, val := range vals {
			fmt.Fprintf(&head, "%s: %s\r\n", name, val)
		}
	}
	head.WriteString("\r\n")
	head.Write(body[:len(body)/2])
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = conn.Write(head.Bytes())
	time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	if tc, ok := conn.(*net.TCPConn); ok && rng.IntN(2) == 0 {
		_ = tc.SetLinger(0) // a reset rather than a close
	}
}

// directWrite PUTs or DELETEs a key straight at the store with the store's own
// key: a write around the gateways, which must never leave a key stuck or
// the catalog apart from the store for good.
func (c *Campaign) directWrite(rng *rand.Rand) {
	bucket, key := c.pickKey(rng)
	cl := c.directClient()
	ctx, cancel := reqCtx()
	defer cancel()
	if rng.IntN(3) == 0 {
		op := c.rec.begin(3000, -1, bucket+"/"+key, history.Delete)
		_, err := cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key})
		directOutcome(&op, err)
		c.rec.finish(op)
		return
	}
	v := fmt.Sprintf("d%d", rng.Uint32())
	body := bodyOf(v)
	c.etags.add(v, md5Hex(body))
	op := c.rec.begin(3000, -1, bucket+"/"+key, history.Write)
	op.Value = v
	_, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(body)})
	directOutcome(&op, err)
	c.rec.finish(op)
}

// directOutcome classifies a write straight at the store as a gateway's is.
func directOutcome(op *history.Op, err error) {
	writeOutcome(op, err)
	op.Detail = "straight at the store: " + op.Detail
}

// storeTakesWrites puts a scratch object straight at the store (in the
// bad-input bucket, which no check audits): nil if the store answers it
// within 2 s.
func (c *Campaign) storeTakesWrites() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.directClient().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(badInputBucket), Key: aws.String("warm-up"), Body: strings.NewReader("warm-up")})
	return err
}

func (c *Campaign) directClient() *s3.Client {
	ep := c.stack.store
	return s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(ep.URL), UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider(ep.AccessKey, ep.SecretKey, ""),
		HTTPClient:  &http.Client{Timeout: 60 * time.Second},
	})
}

// badInput runs the hostile-request corpus against gateway gi while faults may
// be in force: every case must get an S3 error (or a 500/503 where the store
// or database is reached), never a success or a hang; a misbehaviour is a
// violation of the campaign. Leaked leases are caught by the final check.
func (c *Campaign) badInput(ctx context.Context, gi int) string {
	url := c.gatewayURL(gi)
	if url == "" {
		return "gateway down: not run"
	}
	k := c.stack.client
	results := badinput.Run(ctx, badinput.Target{URL: url, AccessKey: k.AccessKey, SecretKey: k.SecretKey, Region: "us-east-1",
		Bucket: badInputBucket, DuringFaults: true}, badinput.Cases())
	problems := 0
	for _, r := range results {
		if r.Problem != "" {
			problems++
			c.addViolation(fmt.Sprintf("bad input %q at gateway %d: %s", r.Case, gi, r.Problem))
		}
	}
	return fmt.Sprintf("%d cases, %d problems", len(results), problems)
}
