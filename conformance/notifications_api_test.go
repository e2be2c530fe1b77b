package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/meta"
)

// notificationDoc is a configuration document with the given entries.
func notificationDoc(entries ...string) []byte {
	return []byte(`<NotificationConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` + strings.Join(entries, "") + `</NotificationConfiguration>`)
}

func queueEntry(id, arn, prefix, suffix string, events ...string) string {
	s := "<QueueConfiguration><Id>" + id + "</Id><Queue>" + arn + "</Queue>"
	for _, e := range events {
		s += "<Event>" + e + "</Event>"
	}
	if prefix != "" || suffix != "" {
		s += "<Filter><S3Key>"
		if prefix != "" {
			s += "<FilterRule><Name>prefix</Name><Value>" + prefix + "</Value></FilterRule>"
		}
		if suffix != "" {
			s += "<FilterRule><Name>Suffix</Name><Value>" + suffix + "</Value></FilterRule>"
		}
		s += "</S3Key></Filter>"
	}
	return s + "</QueueConfiguration>"
}

// PutBucketNotificationConfiguration and Get, raw: a valid configuration
// naming an existing target round-trips; bad ones are answered as S3 answers
// them and change nothing; changing one needs an admin grant.
func TestBucketNotificationAPI(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-notif-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	wh := addTarget(t, "webhook", "api-"+randomSuffix(), "--url", "http://127.0.0.1:1/")
	nt := addTarget(t, "nats", "api-"+randomSuffix(), "--url", "nats://127.0.0.1:1", "--subject", "s")

	// Nothing configured: an empty configuration.
	res, body := doRawBody(g.Endpoint, "GET", "/"+bucket+"?notification", nil, nil)
	if res.Status != 200 || !strings.Contains(string(body), "<NotificationConfiguration") || strings.Contains(string(body), "Configuration><") {
		t.Fatalf("empty GET: %d %s", res.Status, body)
	}
	good := notificationDoc(
		queueEntry("images", wh.ARN, "images/", ".jpg", "s3:ObjectCreated:*"),
		queueEntry("deletes", wh.ARN, "", "", "s3:ObjectRemoved:Delete"),
		`<TopicConfiguration><Id>logs</Id><Topic>`+nt.ARN+`</Topic><Event>s3:ObjectCreated:Put</Event><Filter><S3Key><FilterRule><Name>prefix</Name><Value>logs/</Value></FilterRule></S3Key></Filter></TopicConfiguration>`)
	if res := doRaw(g.Endpoint, "PUT", "/"+bucket+"?notification", good, nil); res.Status != 200 {
		t.Fatalf("PUT a valid configuration: %d %s", res.Status, res.Code)
	}
	res, body = doRawBody(g.Endpoint, "GET", "/"+bucket+"?notification", nil, nil)
	for _, want := range []string{"<Id>images</Id>", "<Queue>" + wh.ARN + "</Queue>", "<Event>s3:ObjectCreated:*</Event>",
		"<Name>prefix</Name><Value>images/</Value>", "<Name>suffix</Name><Value>.jpg</Value>", "<Id>deletes</Id>",
		"<TopicConfiguration><Id>logs</Id><Topic>" + nt.ARN + "</Topic>"} {
		if res.Status != 200 || !strings.Contains(string(body), want) {
			t.Fatalf("GET after PUT lacks %s: %d %s", want, res.Status, body)
		}
	}

	bad := []struct {
		name, code, msg string
		doc             []byte
	}{
		{"unknown ARN", "InvalidArgument", "Unable to validate the following destination configurations",
			notificationDoc(queueEntry("x", "arn:fencegate:sqs::no-such-"+randomSuffix()+":webhook", "", "", "s3:ObjectCreated:*"))},
		{"ARN of the wrong kind", "InvalidArgument", "Unable to validate the following destination configurations",
			notificationDoc(queueEntry("x", strings.TrimSuffix(wh.ARN, "webhook")+"nats", "", "", "s3:ObjectCreated:*"))},
		{"AWS ARN", "InvalidArgument", "Unable to validate the following destination configurations",
			notificationDoc(queueEntry("x", "arn:aws:sqs:us-east-1:123456789012:q", "", "", "s3:ObjectCreated:*"))},
		{"overlap: wildcard and one of its events, nested prefixes", "InvalidArgument", "Configurations overlap",
			notificationDoc(queueEntry("a", wh.ARN, "img/", "", "s3:ObjectCreated:*"), queueEntry("b", nt.ARN, "img/cats/", "", "s3:ObjectCreated:Put"))},
		{"overlap: same events, suffixes nested", "InvalidArgument", "Configurations overlap",
			notificationDoc(queueEntry("a", wh.ARN, "", ".jpg", "s3:ObjectRemoved:*"), queueEntry("b", wh.ARN, "", "x.jpg", "s3:ObjectRemoved:Delete"))},
		{"unknown event", "InvalidArgument", "The event is not supported",
			notificationDoc(queueEntry("a", wh.ARN, "", "", "s3:ObjectRestore:Post"))},
		{"two prefix rules", "InvalidArgument", "more than one prefix",
			notificationDoc(strings.Replace(queueEntry("a", wh.ARN, "a/", "", "s3:ObjectCreated:*"), "</S3Key>", "<FilterRule><Name>Prefix</Name><Value>b/</Value></FilterRule></S3Key>", 1))},
		{"CloudFunction", "InvalidArgument", "Unable to validate",
			notificationDoc(`<CloudFunctionConfiguration><Id>f</Id><CloudFunction>arn:aws:lambda:us-east-1:1:function:f</CloudFunction><Event>s3:ObjectCreated:*</Event></CloudFunctionConfiguration>`)},
		{"malformed XML", "MalformedXML", "", []byte("<NotificationConfiguration><QueueConfiguration>")},
		{"wrong root", "MalformedXML", "", []byte("<Delete><Object><Key>k</Key></Object></Delete>")},
		{"no events", "MalformedXML", "", notificationDoc(queueEntry("a", wh.ARN, "", ""))},
	}
	for _, c := range bad {
		res, body := doRawBody(g.Endpoint, "PUT", "/"+bucket+"?notification", c.doc, nil)
		if res.Status != 400 || res.Code != c.code || !strings.Contains(string(body), c.msg) {
			t.Errorf("%s: %d %s, want 400 %s %q: %s", c.name, res.Status, res.Code, c.code, c.msg, body)
		}
	}
	// None of them changed the configuration.
	if _, after := doRawBody(g.Endpoint, "GET", "/"+bucket+"?notification", nil, nil); string(after) != string(body) {
		t.Fatalf("a refused PUT changed the configuration:\n%s\nwas\n%s", after, body)
	}
	// A bucket that does not exist.
	if res := doRaw(g.Endpoint, "PUT", "/no-such-"+randomSuffix()+"?notification", good, nil); res.Status != 404 || res.Code != "NoSuchBucket" {
		t.Errorf("PUT on a missing bucket: %d %s", res.Status, res.Code)
	}
	// A write grant may read the configuration but not change it.
	writer := g.endpointWithKey(t, "writer", meta.Grant{Bucket: bucket, Permission: meta.PermWrite})
	if res := doRaw(writer, "PUT", "/"+bucket+"?notification", notificationDoc(), nil); res.Status != 403 || res.Code != "AccessDenied" {
		t.Errorf("PUT with a write grant: %d %s", res.Status, res.Code)
	}
	// An empty configuration clears it.
	if res := doRaw(g.Endpoint, "PUT", "/"+bucket+"?notification", notificationDoc(), nil); res.Status != 200 {
		t.Fatalf("PUT empty: %d %s", res.Status, res.Code)
	}
	if _, b := doRawBody(g.Endpoint, "GET", "/"+bucket+"?notification", nil, nil); strings.Contains(string(b), "Configuration><") {
		t.Fatalf("an empty PUT left %s", b)
	}
}

// The aws cli's s3api put-bucket-notification-configuration and
// get-bucket-notification-configuration round trip unchanged, and its
// client-side view of a refused configuration is S3's error.
func TestBucketNotificationAWSCLI(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	bucket := "t-notif-cli-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	wh := addTarget(t, "webhook", "cli-"+randomSuffix(), "--url", "http://127.0.0.1:1/")
	aws := awsCLI(t, &clientFixture{ep: g.Endpoint}, 2)
	cfg := `{"QueueConfigurations":[{"Id":"uploads","QueueArn":"` + wh.ARN + `","Events":["s3:ObjectCreated:*","s3:ObjectRemoved:Delete"],` +
		`"Filter":{"Key":{"FilterRules":[{"Name":"Prefix","Value":"up/"},{"Name":"Suffix","Value":".csv"}]}}}]}`
	path := filepath.Join(t.TempDir(), "n.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	aws.run("s3api", "put-bucket-notification-configuration", "--bucket", bucket, "--notification-configuration", "file://"+path)
	var got struct {
		QueueConfigurations []struct {
			Id       string
			QueueArn string
			Events   []string
			Filter   struct {
				Key struct {
					FilterRules []struct{ Name, Value string }
				}
			}
		}
	}
	decodeJSON(t, aws.run("s3api", "get-bucket-notification-configuration", "--bucket", bucket), &got)
	if len(got.QueueConfigurations) != 1 {
		t.Fatalf("get: %+v", got)
	}
	q := got.QueueConfigurations[0]
	if q.Id != "uploads" || q.QueueArn != wh.ARN || strings.Join(q.Events, ",") != "s3:ObjectCreated:*,s3:ObjectRemoved:Delete" ||
		len(q.Filter.Key.FilterRules) != 2 || q.Filter.Key.FilterRules[0].Value != "up/" || q.Filter.Key.FilterRules[1].Value != ".csv" {
		t.Fatalf("get: %+v", q)
	}
	bad := strings.Replace(cfg, wh.ARN, "arn:fencegate:sqs::missing-"+randomSuffix()+":webhook", 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := aws.try("s3api", "put-bucket-notification-configuration", "--bucket", bucket, "--notification-configuration", "file://"+path)
	if err == nil || !strings.Contains(stderr, "InvalidArgument") || !strings.Contains(stderr, "Unable to validate the following destination configurations") {
		t.Fatalf("a missing target: err %v, stderr %s", err, stderr)
	}
}
