package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// S3 compatibility details the ceph/s3-tests suite checks (`make s3-tests`),
// kept here so that `make test` catches a regression without the external
// suite. Each runs straight against the store too, which proves the test
// right, and through fencegate.

// compatTargets are the store itself and a gateway in front of it.
func compatTargets(t *testing.T) []struct {
	name string
	ep   stack.Endpoint
} {
	g := startGateway(t, gatewayOptions{})
	return []struct {
		name string
		ep   stack.Endpoint
	}{{"direct", testenv.Store(t)}, {"fencegate", g.Endpoint}}
}

// wireResponse is an answer as it came over the wire: header names in the
// case they were sent (net/http would canonicalize them).
type wireResponse struct {
	Status int
	Names  []string            // header names as sent, in order
	Header map[string][]string // by lower-case name
	Body   []byte
}

func (w *wireResponse) get(lower string) string {
	if vs := w.Header[lower]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// metaNames are the user metadata names (x-amz-meta-* less its prefix, which
// is case-insensitive like every header name) as sent, sorted. SDKs take the
// rest of the name as the metadata key, as it is: S3 sends it in lower case.
func (w *wireResponse) metaNames() []string {
	var out []string
	for _, n := range w.Names {
		if strings.HasPrefix(strings.ToLower(n), "x-amz-meta-") {
			out = append(out, n[len("x-amz-meta-"):])
		}
	}
	sort.Strings(out)
	return out
}

// wireExchange sends one signed request on a fresh connection and reads the
// answer's header block byte for byte. Header names are sent exactly as given
// (a mixed-case x-amz-meta-Foo stays mixed case on the wire).
func wireExchange(t *testing.T, ep stack.Endpoint, method, path string, body []byte, header map[string]string) *wireResponse {
	t.Helper()
	req, err := http.NewRequest(method, ep.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = []string{v} // not canonicalized
	}
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", payload)
	creds := aws.Credentials{AccessKeyID: ep.AccessKey, SecretAccessKey: ep.SecretKey}
	if err := s3Signer().SignHTTP(context.Background(), creds, req, payload, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(ep.URL)
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	req.Close = true
	if err := req.Write(conn); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	var raw bytes.Buffer
	br := bufio.NewReader(io.TeeReader(conn, &raw))
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	w := &wireResponse{Status: resp.StatusCode, Header: map[string][]string{}, Body: b}
	head, _, _ := bytes.Cut(raw.Bytes(), []byte("\r\n\r\n"))
	for i, line := range strings.Split(string(head), "\r\n") {
		name, value, ok := strings.Cut(line, ":")
		if i == 0 || !ok {
			continue
		}
		w.Names = append(w.Names, name)
		lower := strings.ToLower(name)
		w.Header[lower] = append(w.Header[lower], strings.TrimSpace(value))
	}
	return w
}

func wantWireStatus(t *testing.T, what string, w *wireResponse, status int) {
	t.Helper()
	if w.Status != status {
		t.Fatalf("%s: status %d, want %d\n%s", what, w.Status, status, w.Body)
	}
}

// Every error body's <RequestId> is the x-amz-request-id header of the same
// answer: errors fencegate makes and errors it relays from the store
// (test_object_requestid_matches_header_on_error).
func TestCompatErrorRequestID(t *testing.T) {
	for _, tg := range compatTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			bucket := testenv.Bucket(t)
			createBucket(t, tg.ep, bucket)
			cases := []struct {
				what, method, path, code string
				status                   int
			}{
				{"missing key", "GET", "/" + bucket + "/no-such-key", "NoSuchKey", 404},
				{"missing bucket", "GET", "/" + bucket + "-missing/key", "NoSuchBucket", 404},
				{"missing upload", "GET", "/" + bucket + "/key?uploadId=no-such-upload", "NoSuchUpload", 404},
			}
			for _, c := range cases {
				w := wireExchange(t, tg.ep, c.method, c.path, nil, nil)
				wantWireStatus(t, c.what, w, c.status)
				if code := xmlText(w.Body, "Code"); code != c.code {
					t.Errorf("%s: code %q, want %q", c.what, code, c.code)
				}
				hdr, body := w.get("x-amz-request-id"), xmlText(w.Body, "RequestId")
				if hdr == "" || body != hdr {
					t.Errorf("%s: x-amz-request-id %q, body's RequestId %q: want the same, non-empty\n%s", c.what, hdr, body, w.Body)
				}
			}
		})
	}
}

func xmlText(doc []byte, name string) string {
	_, rest, ok := bytes.Cut(doc, []byte("<"+name+">"))
	if !ok {
		return ""
	}
	v, _, _ := bytes.Cut(rest, []byte("</"+name+">"))
	return html.UnescapeString(string(v))
}

// User metadata comes back under lower-case names, whatever case the client
// sent them in, after PutObject, CopyObject with either directive and a
// multipart upload, on GET and HEAD (test_object_copy_*_metadata,
// test_multipart_upload, test_object_set_get_metadata_*).
func TestCompatMetadataCase(t *testing.T) {
	for _, tg := range compatTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ep := tg.ep
			bucket := testenv.Bucket(t)
			createBucket(t, ep, bucket)
			obj := "/" + bucket + "/"
			expect := func(what, key string, want map[string]string) {
				t.Helper()
				var names []string
				for k := range want {
					names = append(names, k)
				}
				sort.Strings(names)
				for _, method := range []string{"HEAD", "GET"} {
					w := wireExchange(t, ep, method, obj+key, nil, nil)
					wantWireStatus(t, what+" "+method, w, 200)
					if got := w.metaNames(); strings.Join(got, " ") != strings.Join(names, " ") {
						t.Errorf("%s: %s answers metadata names %q (x-amz-meta-*), want %q", what, method, got, names)
					}
					for k, v := range want {
						if got := w.get("x-amz-meta-" + k); got != v {
							t.Errorf("%s: %s x-amz-meta-%s = %q, want %q", what, method, k, got, v)
						}
					}
				}
			}

			w := wireExchange(t, ep, "PUT", obj+"src", []byte("source body"), map[string]string{
				"x-amz-meta-Foo": "bar", "X-Amz-Meta-Mixed-Case": "Value Kept", "Content-Type": "text/x-compat"})
			wantWireStatus(t, "put", w, 200)
			expect("put", "src", map[string]string{"foo": "bar", "mixed-case": "Value Kept"})

			w = wireExchange(t, ep, "PUT", obj+"copied", nil, map[string]string{"x-amz-copy-source": obj + "src"})
			wantWireStatus(t, "copy", w, 200)
			expect("copy (COPY directive)", "copied", map[string]string{"foo": "bar", "mixed-case": "Value Kept"})

			w = wireExchange(t, ep, "PUT", obj+"replaced", nil, map[string]string{"x-amz-copy-source": obj + "src",
				"x-amz-metadata-directive": "REPLACE", "x-amz-meta-Other-Key": "v3"})
			wantWireStatus(t, "copy replace", w, 200)
			expect("copy (REPLACE directive)", "replaced", map[string]string{"other-key": "v3"})

			w = wireExchange(t, ep, "POST", obj+"mp?uploads", nil, map[string]string{"x-amz-meta-Foo": "bar", "X-AMZ-META-UPPER": "u"})
			wantWireStatus(t, "create upload", w, 200)
			uploadID := xmlText(w.Body, "UploadId")
			w = wireExchange(t, ep, "PUT", obj+"mp?partNumber=1&uploadId="+url.QueryEscape(uploadID), []byte("the only part"), nil)
			wantWireStatus(t, "upload part", w, 200)
			etag := w.get("etag")
			doc := `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + etag + `</ETag></Part></CompleteMultipartUpload>`
			w = wireExchange(t, ep, "POST", obj+"mp?uploadId="+url.QueryEscape(uploadID), []byte(doc), nil)
			wantWireStatus(t, "complete", w, 200)
			expect("multipart upload", "mp", map[string]string{"foo": "bar", "upper": "u"})

			// A real client: botocore (aws cli v1, as boto3) keeps the case of a
			// metadata name it is given on upload and shows names as received.
			aws := awsCLI(t, &clientFixture{ep: ep}, 1)
			aws.run("s3api", "put-object", "--bucket", bucket, "--key", "cli", "--metadata", "Foo=bar,CamelCase=x")
			for _, key := range []string{"cli", "mp"} {
				var head awsHead
				decodeJSON(t, aws.run("s3api", "head-object", "--bucket", bucket, "--key", key), &head)
				for k := range head.Metadata {
					if k != strings.ToLower(k) {
						t.Errorf("aws cli head-object %s: metadata %v has a name not in lower case", key, head.Metadata)
						break
					}
				}
			}
		})
	}
}

// checksumOf is the base64 x-amz-checksum-* value of b.
func checksumOf(algo string, b []byte) string {
	var h hash.Hash
	switch algo {
	case "crc32":
		h = crc32.NewIEEE()
	case "crc32c":
		h = crc32.New(crc32.MakeTable(crc32.Castagnoli))
	case "sha1":
		h = sha1.New()
	case "sha256":
		h = sha256.New()
	}
	h.Write(b)
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// A client's x-amz-checksum-* reaches the store in its own algorithm and comes
// back (on the PUT's answer and on HEAD with checksum mode); a value that does
// not match the body, or does not even decode, is BadDigest
// (test_object_checksum_sha256).
func TestCompatChecksums(t *testing.T) {
	body := []byte(strings.Repeat("A", 1024))
	for _, tg := range compatTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ep := tg.ep
			bucket := testenv.Bucket(t)
			createBucket(t, ep, bucket)
			for _, algo := range []string{"crc32", "crc32c", "sha1", "sha256"} {
				name := "x-amz-checksum-" + algo
				sum := checksumOf(algo, body)
				path := "/" + bucket + "/" + algo
				w := wireExchange(t, ep, "PUT", path, body, map[string]string{name: sum, "x-amz-sdk-checksum-algorithm": strings.ToUpper(algo)})
				wantWireStatus(t, algo+" put", w, 200)
				if got := w.get(name); got != sum {
					t.Errorf("%s: the PUT answers %s %q, want %q", algo, name, got, sum)
				}
				w = wireExchange(t, ep, "HEAD", path, nil, map[string]string{"x-amz-checksum-mode": "ENABLED"})
				wantWireStatus(t, algo+" head", w, 200)
				if got := w.get(name); got != sum {
					t.Errorf("%s: HEAD with checksum mode answers %s %q, want %q", algo, name, got, sum)
				}
				other := checksumOf(algo, []byte("another body"))
				for _, bad := range []string{other, "bad"} {
					w = wireExchange(t, ep, "PUT", path, body, map[string]string{name: bad})
					if w.Status != 400 || xmlText(w.Body, "Code") != "BadDigest" {
						t.Errorf("%s: PUT with %s %q: %d %s, want 400 BadDigest", algo, name, bad, w.Status, xmlText(w.Body, "Code"))
					}
					if hdr := w.get("x-amz-request-id"); hdr != xmlText(w.Body, "RequestId") {
						t.Errorf("%s: error body's RequestId differs from the header %q", algo, hdr)
					}
				}
			}
			if t.Failed() {
				return
			}
			// What a failed PUT left: the object before it.
			if got := getBody(t, ep, bucket, "sha256"); !bytes.Equal(got, body) {
				t.Errorf("after refused PUTs the object holds %d bytes, want the first PUT's %d", len(got), len(body))
			}
		})
	}
}

// A multipart upload made with SHA256 checksums: each part's checksum and the
// whole upload's composite one ("<base64 of the SHA256 of the parts'
// digests>-N") come back from the store through the gateway, and a repeated
// Complete answers the same ETag and checksum (test_multipart_reupload_checksum_and_etag).
func TestCompatMultipartChecksum(t *testing.T) {
	parts := [][]byte{bytes.Repeat([]byte("A"), 5<<20), bytes.Repeat([]byte("B"), 1<<10)}
	for _, tg := range compatTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ep := tg.ep
			bucket := testenv.Bucket(t)
			createBucket(t, ep, bucket)
			obj := "/" + bucket + "/mp"
			w := wireExchange(t, ep, "POST", obj+"?uploads", nil, map[string]string{"x-amz-checksum-algorithm": "SHA256"})
			wantWireStatus(t, "create upload", w, 200)
			if got := w.get("x-amz-checksum-algorithm"); got != "SHA256" {
				t.Errorf("create upload answers x-amz-checksum-algorithm %q, want SHA256", got)
			}
			q := "?uploadId=" + url.QueryEscape(xmlText(w.Body, "UploadId"))
			doc := "<CompleteMultipartUpload>"
			var digests []byte
			for i, p := range parts {
				sum := checksumOf("sha256", p)
				w = wireExchange(t, ep, "PUT", fmt.Sprintf("%s%s&partNumber=%d", obj, q, i+1), p, map[string]string{"x-amz-checksum-sha256": sum})
				wantWireStatus(t, "upload part", w, 200)
				if got := w.get("x-amz-checksum-sha256"); got != sum {
					t.Errorf("part %d: answered x-amz-checksum-sha256 %q, want %q", i+1, got, sum)
				}
				d := sha256.Sum256(p)
				digests = append(digests, d[:]...)
				doc += fmt.Sprintf("<Part><PartNumber>%d</PartNumber><ETag>%s</ETag><ChecksumSHA256>%s</ChecksumSHA256></Part>", i+1, w.get("etag"), sum)
			}
			doc += "</CompleteMultipartUpload>"
			composite := checksumOf("sha256", digests) + fmt.Sprintf("-%d", len(parts))
			var first *wireResponse
			for attempt := 1; attempt <= 2; attempt++ {
				w = wireExchange(t, ep, "POST", obj+q, []byte(doc), map[string]string{"x-amz-checksum-sha256": composite})
				wantWireStatus(t, fmt.Sprintf("complete (attempt %d)", attempt), w, 200)
				if attempt == 1 {
					first = w
					if got := xmlText(w.Body, "ChecksumSHA256"); got != composite {
						t.Fatalf("complete answers ChecksumSHA256 %q, want %q\n%s", got, composite, w.Body)
					}
					continue
				}
				if xmlText(w.Body, "ETag") != xmlText(first.Body, "ETag") {
					t.Errorf("repeated complete: ETag %s, the first answered %s", xmlText(w.Body, "ETag"), xmlText(first.Body, "ETag"))
				}
				if got := xmlText(w.Body, "ChecksumSHA256"); got != composite {
					t.Errorf("repeated complete: ChecksumSHA256 %q, want %q\n%s", got, composite, w.Body)
				}
				for _, h := range []string{"x-amz-checksum-sha256", "x-amz-checksum-type"} {
					if w.get(h) != first.get(h) {
						t.Errorf("repeated complete: %s %q, the first answered %q", h, w.get(h), first.get(h))
					}
				}
				if got, want := xmlText(w.Body, "ChecksumType"), xmlText(first.Body, "ChecksumType"); got != want {
					t.Errorf("repeated complete: ChecksumType %q, the first answered %q", got, want)
				}
			}
		})
	}
}

// A copy of an object onto itself that changes nothing is refused with S3's
// 400 InvalidRequest; with the REPLACE directive it replaces the metadata
// (test_object_copy_to_itself, test_object_copy_to_itself_with_metadata).
func TestCompatCopyToItself(t *testing.T) {
	for _, tg := range compatTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ep := tg.ep
			bucket := testenv.Bucket(t)
			createBucket(t, ep, bucket)
			obj := "/" + bucket + "/self"
			wantWireStatus(t, "put", wireExchange(t, ep, "PUT", obj, []byte("foo"), map[string]string{"x-amz-meta-a": "1"}), 200)
			for _, directive := range []string{"", "COPY"} {
				h := map[string]string{"x-amz-copy-source": obj}
				if directive != "" {
					h["x-amz-metadata-directive"] = directive
				}
				w := wireExchange(t, ep, "PUT", obj, nil, h)
				if w.Status != 400 || xmlText(w.Body, "Code") != "InvalidRequest" {
					t.Errorf("copy onto itself (directive %q): %d %s, want 400 InvalidRequest", directive, w.Status, w.Body)
				}
			}
			w := wireExchange(t, ep, "PUT", obj, nil, map[string]string{"x-amz-copy-source": obj,
				"x-amz-metadata-directive": "REPLACE", "x-amz-meta-b": "2"})
			wantWireStatus(t, "copy onto itself, REPLACE", w, 200)
			w = wireExchange(t, ep, "GET", obj, nil, nil)
			wantWireStatus(t, "get", w, 200)
			if string(w.Body) != "foo" || w.get("x-amz-meta-b") != "2" || w.get("x-amz-meta-a") != "" {
				t.Errorf("after the REPLACE copy onto itself: body %q, metadata a=%q b=%q; want foo, b=2 only", w.Body, w.get("x-amz-meta-a"), w.get("x-amz-meta-b"))
			}
		})
	}
}

// Delete markers in a versioned bucket, as the store reports them: DeleteObject
// answers x-amz-delete-marker and x-amz-version-id, and DeleteObjects' result
// carries DeleteMarker, DeleteMarkerVersionId and VersionId for each key
// (test_versioning_multi_object_delete_with_marker_create).
func TestCompatDeleteMarkers(t *testing.T) {
	for _, tg := range compatTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ep := tg.ep
			bucket := testenv.Bucket(t)
			createBucket(t, ep, bucket)
			cli := awsCLI(t, &clientFixture{ep: ep}, 1)
			cli.run("s3api", "put-bucket-versioning", "--bucket", bucket, "--versioning-configuration", "Status=Enabled")

			// DeleteObjects of a key that never existed makes a delete marker.
			var res struct {
				Deleted []struct {
					Key                   string
					VersionId             string
					DeleteMarker          bool
					DeleteMarkerVersionId string
				}
			}
			decodeJSON(t, cli.run("s3api", "delete-objects", "--bucket", bucket, "--delete", `{"Objects":[{"Key":"key"}]}`), &res)
			var versions struct {
				Versions      []struct{ Key, VersionId string }
				DeleteMarkers []struct{ Key, VersionId string }
			}
			decodeJSON(t, cli.run("s3api", "list-object-versions", "--bucket", bucket), &versions)
			if len(res.Deleted) != 1 || !res.Deleted[0].DeleteMarker || res.Deleted[0].DeleteMarkerVersionId == "" {
				t.Fatalf("delete-objects: %+v, want one Deleted with DeleteMarker and DeleteMarkerVersionId", res)
			}
			if len(versions.DeleteMarkers) != 1 || versions.DeleteMarkers[0].VersionId != res.Deleted[0].DeleteMarkerVersionId {
				t.Errorf("delete-objects' DeleteMarkerVersionId %q; the listing's delete markers: %+v", res.Deleted[0].DeleteMarkerVersionId, versions.DeleteMarkers)
			}

			// DeleteObject answers with the marker's headers.
			wantWireStatus(t, "put", wireExchange(t, ep, "PUT", "/"+bucket+"/obj", []byte("v1"), nil), 200)
			w := wireExchange(t, ep, "DELETE", "/"+bucket+"/obj", nil, nil)
			wantWireStatus(t, "delete", w, 204)
			if w.get("x-amz-delete-marker") != "true" || w.get("x-amz-version-id") == "" {
				t.Errorf("DeleteObject: x-amz-delete-marker %q, x-amz-version-id %q; want true and the marker's id", w.get("x-amz-delete-marker"), w.get("x-amz-version-id"))
			}
			marker := w.get("x-amz-version-id")

			// Deleting versions by id: the version, then the marker itself.
			wantWireStatus(t, "put", wireExchange(t, ep, "PUT", "/"+bucket+"/two", []byte("v1"), nil), 200)
			var twoVersions struct {
				Versions []struct{ Key, VersionId string }
			}
			decodeJSON(t, cli.run("s3api", "list-object-versions", "--bucket", bucket, "--prefix", "two"), &twoVersions)
			if len(twoVersions.Versions) != 1 {
				t.Fatalf("versions of two: %+v", twoVersions.Versions)
			}
			v := twoVersions.Versions[0].VersionId
			doc := fmt.Sprintf(`{"Objects":[{"Key":"two","VersionId":%q},{"Key":"obj","VersionId":%q}]}`, v, marker)
			var byVersion struct {
				Deleted []struct {
					Key                   string
					VersionId             string
					DeleteMarker          bool
					DeleteMarkerVersionId string
				}
			}
			decodeJSON(t, cli.run("s3api", "delete-objects", "--bucket", bucket, "--delete", doc), &byVersion)
			got := map[string]string{}
			for _, d := range byVersion.Deleted {
				got[d.Key] = fmt.Sprintf("version=%s marker=%v markerVersion=%s", d.VersionId, d.DeleteMarker, d.DeleteMarkerVersionId)
			}
			want := map[string]string{
				"two": fmt.Sprintf("version=%s marker=false markerVersion=", v),
				"obj": fmt.Sprintf("version=%s marker=true markerVersion=%s", marker, marker),
			}
			if tg.name == "direct" {
				// SeaweedFS's own DeleteObjects leaves out the VersionId of a
				// deleted marker; fencegate deletes each key with DeleteObject
				// and names the version it was asked to delete, as S3 does.
				want["obj"] = "version= marker=true markerVersion=" + marker
			}
			for k, wv := range want {
				if got[k] != wv {
					t.Errorf("delete-objects by version, %s: %s, want %s", k, got[k], wv)
				}
			}
		})
	}
}
