package conformance

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// Attacks on browser-form uploads (issue 28): what a form may make the
// store do, and what a form, signed or not, may hold of the gateway's
// shared budgets.

// A form's fields reach the store only as the object properties S3
// documents for POST Object: a key with write (only) on bucket A and no
// grant on B signs a policy naming x-amz-copy-source B/secret.txt, and other
// fields S3 does not take from a form (a metadata directive, a rename
// source). The upload is refused or stores the form's file and nothing
// else: A/stolen never holds B's object.
func TestPostObjectFormCannotCopy(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	a, b := "t-postcpa-"+randomSuffix(), "t-postcpb-"+randomSuffix()
	createBucket(t, g.Endpoint, a)
	createBucket(t, g.Endpoint, b)
	const secret = "B's secret, readable only with a grant on B"
	if r := putRaw(g.Endpoint, b, "secret.txt", []byte(secret), nil); r.Status != 200 {
		t.Fatalf("PUT the secret: %+v", r)
	}
	ep := g.endpointWithKey(t, "write on A only "+t.Name(), meta.Grant{Bucket: a, Permission: meta.PermWrite})
	const key = "stolen"
	attack := []formField{
		{"key", key},
		{"x-amz-copy-source", b + "/secret.txt"},
		{"x-amz-metadata-directive", "COPY"},
		{"x-amz-rename-source", b + "/secret.txt"},
	}
	conds := []any{map[string]string{"bucket": a}, map[string]string{"key": key}}
	for _, f := range attack[1:] {
		conds = append(conds, map[string]string{f.name: f.value})
	}
	fields := append(attack, postPolicy(ep, time.Now().Add(time.Hour), conds...)...)
	resp, body := postForm(t, g.URL, a, fields, "f.txt", []byte("the form's own file"))
	t.Logf("the form: %s %s", resp.Status, body)
	got, err := g.Store.S3Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(a), Key: aws.String(key)})
	if err != nil {
		if resp.StatusCode < 300 {
			t.Fatalf("answered %s but nothing at the store: %v", resp.Status, err)
		}
		return
	}
	if content := string(readAllClose(t, got.Body)); content != "the form's own file" || resp.StatusCode >= 300 {
		t.Fatalf("%s, %s/%s holds %q: the form made the store copy from %s", resp.Status, a, key, content, b)
	}
}

// spoolFiles counts this process's open spool files (the gateway runs in
// the test's process): unlinked, they are found only by their descriptors.
func spoolFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(target, "fencegate-spool") {
			n++
		}
	}
	return n
}

// A spooled body whose write is refused before it is sent gives its share
// of --spool-budget back and closes its file: a conditional PUT of a leased
// key (409) and a form that waits out --lease-wait (503), each repeated past
// what the budget holds. Afterwards the spool is empty and another form
// still lands.
func TestRefusedSpooledWritesGiveBack(t *testing.T) {
	cfg := lease.Config{TTL: 10 * time.Second, RenewEvery: 2 * time.Second, Margin: 2 * time.Second,
		WaitMax: 500 * time.Millisecond, WaitLimit: 2 * time.Second, ProgressEvery: 200 * time.Millisecond, WaitPoll: 50 * time.Millisecond}
	const spoolMax, body = 64 << 10, 32 << 10 // spooled to a file: over the 4 KiB in memory
	g := startGateway(t, gatewayOptions{Lease: cfg, BodyStall: 30 * time.Second, Configure: func(c *gateway.Config) {
		c.SpoolMax, c.SpoolMemory, c.SpoolBudget = spoolMax, 4<<10, 4*body
	}})
	bucket := "t-spoolback-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	files := spoolFiles(t)

	// A PUT over --spool-max streams under the key's lease; its client stops.
	holder := startRawPut(t, g.Endpoint, bucket, "held", 1<<20)
	defer holder.Close()
	if _, err := holder.Write(bytes.Repeat([]byte("h"), 64<<10)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the holder to lease the key", 5*time.Second, func() bool {
		for _, a := range attemptsOf(t, bucket, "held") {
			if a.State == "leased" {
				return true
			}
		}
		return false
	})
	file := bytes.Repeat([]byte("f"), body)
	for i := 0; i < 6; i++ {
		r := putRaw(g.Endpoint, bucket, "held", file, map[string]string{"If-None-Match": "*"})
		if r.Status != http.StatusConflict || r.Code != "ConditionalRequestConflict" {
			t.Fatalf("conditional PUT %d of the leased key: %+v, want 409 ConditionalRequestConflict", i, r)
		}
	}
	waitFor(t, "the refused PUTs' spool space to come back", 5*time.Second, func() bool { return g.Server.SpooledBytes() == 0 })
	if n := spoolFiles(t); n != files {
		t.Fatalf("%d spool files open after the refused PUTs, want %d", n, files)
	}
	form := func(key string) []formField {
		return append([]formField{{"key", key}}, postPolicy(g.Endpoint, time.Now().Add(time.Hour),
			map[string]string{"bucket": bucket}, map[string]string{"key": key})...)
	}
	for i := 0; i < 6; i++ {
		resp, b := postForm(t, g.URL, bucket, form("held"), "f", file)
		if resp.StatusCode != http.StatusServiceUnavailable || errorCode(b) != "SlowDown" {
			t.Fatalf("form %d to the leased key: %s %s, want 503 SlowDown", i, resp.Status, b)
		}
	}
	waitFor(t, "the refused forms' spool space to come back", 5*time.Second, func() bool { return g.Server.SpooledBytes() == 0 })
	if n := spoolFiles(t); n != files {
		t.Fatalf("%d spool files open after the refused forms, want %d", n, files)
	}
	if resp, b := postForm(t, g.URL, bucket, form("other"), "f", file); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("a form after the refused writes: %s %s", resp.Status, b)
	}
	_ = holder.(*net.TCPConn).SetLinger(0)
}

// holdForm sends a form's header and all of it but its last hold bytes (the
// rest of its file and the closing boundary), from the local address from
// ("" any), and leaves the connection open: a form held inside its file part.
func holdForm(t *testing.T, url, bucket, from string, fields []formField, file []byte, hold int) net.Conn {
	t.Helper()
	form, ctype := formBody(t, fields, "f", file)
	host := strings.TrimPrefix(url, "http://")
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	conn, err := d.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /%s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", bucket, host, ctype, len(form))
	if _, err := conn.Write(form[:len(form)-hold]); err != nil {
		t.Fatal(err)
	}
	return conn
}

// Sixteen forms with a valid policy and no content-length-range, each held
// inside its file part, hold the spool's budget only for the bytes they
// sent: another form still lands at once.
func TestPostObjectHeldFormsDoNotStarveSpool(t *testing.T) {
	const spoolMax = 256 << 10
	g := startGateway(t, gatewayOptions{BodyStall: 30 * time.Second, Configure: func(c *gateway.Config) {
		c.SpoolMax, c.SpoolMemory, c.SpoolBudget = spoolMax, 64<<10, 4*spoolMax
	}})
	bucket := "t-postheld-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	form := func(key string) []formField {
		return append([]formField{{"key", key}}, postPolicy(g.Endpoint, time.Now().Add(time.Hour),
			map[string]string{"bucket": bucket}, map[string]string{"key": key})...)
	}
	file := bytes.Repeat([]byte("h"), 200<<10)
	for i := 0; i < 16; i++ {
		conn := holdForm(t, g.URL, bucket, "", form(fmt.Sprintf("held-%d", i)), file, 190<<10)
		defer conn.Close()
	}
	time.Sleep(500 * time.Millisecond) // the held forms are inside their files
	t.Logf("16 held forms hold %d bytes of the spool", g.Server.SpooledBytes())
	start := time.Now()
	resp, b := postForm(t, g.URL, bucket, form("other"), "f", bytes.Repeat([]byte("o"), 100<<10))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("a form beside 16 held ones: %s %s after %s", resp.Status, b, time.Since(start))
	}
	if held := g.Server.SpooledBytes(); held > 16*(20<<10) {
		t.Fatalf("16 held forms that sent about 10 KiB of file each hold %d bytes of the spool", held)
	}
}

// Forms whose policy is not verified yet hold only a small share of
// --max-body-memory, bounded per address: many connections from one
// address, each trickling an unfinished field, leave authenticated requests
// their memory (a DeleteObjects still succeeds) and another address's form
// still lands; past the address's share, a form is answered 503 at once.
func TestUnverifiedFormsDoNotHoldBodyMemory(t *testing.T) {
	g := startGateway(t, gatewayOptions{BodyStall: 30 * time.Second, Configure: func(c *gateway.Config) {
		c.BodyMemory, c.BodyMemoryWait = 2<<20, 500*time.Millisecond
	}})
	bucket := "t-postmem-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	host := strings.TrimPrefix(g.URL, "http://")
	const attacker = "127.0.0.2"
	// Past the up to 8 KiB of body the server reads before the handler runs:
	// the form is in its handler, reading an unfinished field.
	unfinished := strings.Repeat("u", 12<<10)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 64; i++ {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(attacker)}}
		conn, err := d.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		fmt.Fprintf(conn, "POST /%s HTTP/1.1\r\nHost: %s\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n"+
			"--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n%s", bucket, host, unfinished)
	}
	time.Sleep(500 * time.Millisecond) // every trickling form is being read
	t.Logf("64 unverified forms hold %d bytes of body memory", g.Server.BodyMemoryInUse())
	if in := g.Server.BodyMemoryInUse(); in > 2<<20/8 {
		t.Errorf("64 unverified forms from one address hold %d bytes of the 2 MiB body memory", in)
	}
	// An authenticated DeleteObjects is read whole, from body memory.
	if r := putRaw(g.Endpoint, bucket, "victim", []byte("x"), nil); r.Status != 200 {
		t.Fatalf("PUT: %+v", r)
	}
	out, err := g.S3Client().DeleteObjects(context.Background(), &s3.DeleteObjectsInput{Bucket: aws.String(bucket),
		Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: aws.String("victim")}}}})
	if err != nil || len(out.Errors) != 0 {
		t.Fatalf("an authenticated DeleteObjects beside 64 unverified forms: %v %+v", err, out)
	}
	// A form from another address lands.
	fields := append([]formField{{"key", "k"}}, postPolicy(g.Endpoint, time.Now().Add(time.Hour),
		map[string]string{"bucket": bucket}, map[string]string{"key": "k"})...)
	if resp, b := postForm(t, g.URL, bucket, fields, "f", []byte("from elsewhere")); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("a form from another address: %s %s", resp.Status, b)
	}
	// The last of the attacker's forms was over its address's share: 503.
	last := conns[len(conns)-1]
	_ = last.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(last), nil)
	if err != nil {
		t.Fatalf("the 64th unverified form from one address was not answered: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || errorCode(b) != "SlowDown" {
		t.Fatalf("the 64th unverified form from one address: %s %s, want 503 SlowDown", resp.Status, b)
	}
}

// A header that did not arrive as a header (a SigV4-signed query parameter,
// a POST form's field covered by its policy) whose value holds a line break,
// or whose name holds a space, cannot travel to the store as it was signed:
// it is refused as the client's error, before any lease, instead of being
// sent, rewritten by the HTTP client after fencegate signed it, and refused
// by the store, which answered 500 and logged fencegate's own credentials
// as wrong.
func TestHeadersHTTPCannotCarryAreRefused(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-crlf-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	for _, q := range []string{"x-amz-meta-a=x%0D%0Ay", "x-amz-meta-a%20b=1", "x-amz-meta-a=x%00y"} {
		w := wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/q?"+q, []byte("body"), nil)
		if w.Status != http.StatusBadRequest || errorCode(w.Body) != "InvalidArgument" {
			t.Errorf("PUT ?%s: %d %s", q, w.Status, w.Body)
		}
	}
	assertNothingLanded(t, g, bucket, "q")

	for _, field := range []formField{{"x-amz-meta-a", "x\r\nX-Injected: 1"}, {"Content-Type", "text/plain\r\nX-Injected: 1"}} {
		fields := append([]formField{{"key", "form"}, field}, postPolicy(g.Endpoint, time.Now().Add(time.Hour),
			map[string]string{"bucket": bucket}, map[string]string{"key": "form"},
			[]any{"starts-with", "$" + field.name, ""})...)
		resp, body := postForm(t, g.URL, bucket, fields, "f.txt", []byte("body"))
		if resp.StatusCode != http.StatusBadRequest || errorCode(body) != "InvalidArgument" {
			t.Errorf("POST with %s %q: %s %s", field.name, field.value, resp.Status, body)
		}
	}
	assertNothingLanded(t, g, bucket, "form")

	// A value HTTP can carry still works, as a query parameter too.
	if w := wireExchange(t, g.Endpoint, "PUT", "/"+bucket+"/ok?x-amz-meta-a=x%20y", []byte("body"), nil); w.Status != 200 {
		t.Errorf("PUT with a plain metadata query parameter: %d %s", w.Status, w.Body)
	}
}
