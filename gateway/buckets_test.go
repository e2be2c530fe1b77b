package gateway

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

const storeBuckets = `<?xml version="1.0" encoding="UTF-8"?>
<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Owner><ID>store</ID></Owner><Buckets>` +
	`<Bucket><Name>a&amp;1</Name><CreationDate>2026-12-07T00:00:00Z</CreationDate></Bucket>` +
	`<Bucket><Name>a2</Name><CreationDate>2026-12-07T00:00:00Z</CreationDate></Bucket>` +
	`<Bucket><Name>b1</Name><CreationDate>2026-12-07T00:00:00Z</CreationDate></Bucket>` +
	`<Bucket><Name>fencegate-probe</Name><CreationDate>2026-12-07T00:00:00Z</CreationDate></Bucket>` +
	`</Buckets></ListAllMyBucketsResult>`

// listPage runs one ListBuckets answer through visibleBuckets with the
// query given, as relay does.
func listPage(t *testing.T, key *AccessKey, query string) (names []string, token string, doc string) {
	t.Helper()
	args := fasthttp.AcquireArgs()
	defer fasthttp.ReleaseArgs(args)
	args.Parse(query)
	page, e := parseBucketPage(args)
	if e != nil {
		t.Fatalf("?%s: %s", query, e.Code)
	}
	resp := &http.Response{Body: io.NopCloser(strings.NewReader(storeBuckets))}
	body, e := visibleBuckets(resp, key, "fencegate-probe", page)
	if e != nil {
		t.Fatal(e.Code)
	}
	for rest := body; ; {
		i := bytes.Index(rest, []byte("<Bucket>"))
		if i < 0 {
			break
		}
		j := bytes.Index(rest[i:], []byte("</Bucket>")) + i
		names = append(names, xmlElement(rest[i:j], "Name"))
		rest = rest[j:]
	}
	return names, xmlElement(body, "ContinuationToken"), string(body)
}

func TestListBucketsPages(t *testing.T) {
	all := &AccessKey{ID: "k", Grants: []Grant{{Bucket: "*", Perm: PermRead}}}
	names, tok, doc := listPage(t, all, "")
	if strings.Join(names, ",") != "a&1,a2,b1" || tok != "" || !strings.Contains(doc, "<ID>k</ID>") {
		t.Fatalf("no paging: %v token %q\n%s", names, tok, doc)
	}
	var got []string
	query := "max-buckets=2"
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("the pages do not end")
		}
		names, tok, _ = listPage(t, all, query)
		got = append(got, names...)
		if tok == "" {
			break
		}
		query = "max-buckets=2&continuation-token=" + tok
	}
	if strings.Join(got, ",") != "a&1,a2,b1" {
		t.Fatalf("paged by two: %v", got)
	}
	names, tok, doc = listPage(t, all, "prefix=a%26&max-buckets=5")
	if strings.Join(names, ",") != "a&1" || tok != "" || !strings.Contains(doc, "<Prefix>a&amp;</Prefix>") {
		t.Fatalf("prefix a&: %v token %q\n%s", names, tok, doc)
	}
	named := &AccessKey{ID: "p", Grants: []Grant{{Bucket: "fencegate-probe", Perm: PermRead}, {Bucket: "b1", Perm: PermRead}}}
	if names, _, _ = listPage(t, named, "max-buckets=1&continuation-token="+tok1("a2")); strings.Join(names, ",") != "b1" {
		t.Fatalf("a key granted b1 and the probe's bucket, after a2: %v", names)
	}
	for _, q := range []string{"max-buckets=0", "max-buckets=10001", "max-buckets=-1", "max-buckets=", "continuation-token=!"} {
		args := fasthttp.AcquireArgs()
		args.Parse(q)
		if _, e := parseBucketPage(args); e == nil || e.Code != "InvalidArgument" || e.Status != 400 {
			t.Errorf("?%s: %+v, want 400 InvalidArgument", q, e)
		}
		fasthttp.ReleaseArgs(args)
	}
}

// tok1 is the continuation token fencegate gives after bucket name.
func tok1(name string) string {
	doc := bucketPage{max: 1}.of([]byte("<ListAllMyBucketsResult><Buckets><Bucket><Name>"+name+"</Name></Bucket><Bucket><Name>~</Name></Bucket></Buckets></ListAllMyBucketsResult>"),
		func(string) bool { return true })
	return xmlElement(doc, "ContinuationToken")
}
