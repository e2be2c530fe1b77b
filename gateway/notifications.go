package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/fencegate/fencegate/sigv4"
	"github.com/fencegate/fencegate/store"
)

// A bucket's notification configuration (S3's PutBucketNotificationConfiguration
// and GetBucketNotificationConfiguration) is kept in the catalog, not at the
// store: fencegate delivers the events itself, from the outbox
// (docs/NOTIFICATIONS.md).

// NotificationRule is one QueueConfiguration or TopicConfiguration.
type NotificationRule struct {
	ID     string
	Kind   string // "queue" or "topic"
	ARN    string // the target's ARN, arn:fencegate:sqs::NAME:KIND
	Events []string
	Prefix string
	Suffix string
}

// UnknownTargetsError: the configuration names ARNs that are no target.
type UnknownTargetsError struct{ ARNs []string }

func (e *UnknownTargetsError) Error() string {
	return "unknown notification targets: " + strings.Join(e.ARNs, ", ")
}

// Notifications is where buckets' notification configurations live
// (PostgreSQL, behind meta). Set replaces a bucket's whole configuration at
// once and returns *UnknownTargetsError for ARNs that name no target.
type Notifications interface {
	BucketNotifications(ctx context.Context, bucket string) ([]NotificationRule, error)
	SetBucketNotifications(ctx context.Context, bucket string, rules []NotificationRule) error
}

// notificationEvents are the event types fencegate emits and accepts.
var notificationEvents = map[string]bool{
	"s3:ObjectCreated:*": true, "s3:ObjectCreated:Put": true, "s3:ObjectCreated:Post": true,
	"s3:ObjectCreated:Copy": true, "s3:ObjectCreated:CompleteMultipartUpload": true,
	"s3:ObjectRemoved:*": true, "s3:ObjectRemoved:Delete": true, "s3:ObjectRemoved:DeleteMarkerCreated": true,
}

type filterRuleXML struct {
	Name  string `xml:"Name"`
	Value string `xml:"Value"`
}

type notificationEntryXML struct {
	ID     string   `xml:"Id"`
	Queue  string   `xml:"Queue"`
	Topic  string   `xml:"Topic"`
	Events []string `xml:"Event"`
	Filter *struct {
		S3Key *struct {
			Rules []filterRuleXML `xml:"FilterRule"`
		} `xml:"S3Key"`
	} `xml:"Filter"`
}

type notificationConfigXML struct {
	XMLName  xml.Name
	Queues   []notificationEntryXML `xml:"QueueConfiguration"`
	Topics   []notificationEntryXML `xml:"TopicConfiguration"`
	Lambdas  []notificationEntryXML `xml:"CloudFunctionConfiguration"`
	Lambdas2 []notificationEntryXML `xml:"LambdaFunctionConfiguration"`
	Bridge   []struct{}             `xml:"EventBridgeConfiguration"`
}

func invalidArgument(msg string, fields ...sigv4.Field) *apiError {
	return &apiError{Code: "InvalidArgument", Status: http.StatusBadRequest, Message: msg, Fields: fields}
}

// parseNotificationConfig reads and validates a configuration document as S3
// does, all but the targets' existence.
func parseNotificationConfig(body []byte) ([]NotificationRule, *apiError) {
	var doc notificationConfigXML
	if err := xml.Unmarshal(body, &doc); err != nil || doc.XMLName.Local != "NotificationConfiguration" {
		return nil, errMalformedXML
	}
	if len(doc.Lambdas)+len(doc.Lambdas2)+len(doc.Bridge) > 0 {
		return nil, invalidArgument("Unable to validate the following destination configurations: fencegate delivers to queue and topic targets only (CloudFunction, LambdaFunction and EventBridge configurations are not supported)")
	}
	var rules []NotificationRule
	add := func(kind string, entries []notificationEntryXML) *apiError {
		for _, e := range entries {
			r := NotificationRule{ID: e.ID, Kind: kind, ARN: strings.TrimSpace(e.Queue)}
			if kind == "topic" {
				r.ARN = strings.TrimSpace(e.Topic)
			}
			if r.ARN == "" || len(e.Events) == 0 {
				return errMalformedXML
			}
			if r.ID == "" {
				b := make([]byte, 16)
				_, _ = rand.Read(b)
				r.ID = hex.EncodeToString(b)
			}
			seen := map[string]bool{}
			for _, ev := range e.Events {
				ev = strings.TrimSpace(ev)
				if !notificationEvents[ev] {
					return invalidArgument("The event is not supported for notifications", sigv4.Field{Name: "ArgumentName", Value: "Event"},
						sigv4.Field{Name: "ArgumentValue", Value: ev})
				}
				if !seen[ev] {
					seen[ev] = true
					r.Events = append(r.Events, ev)
				}
			}
			if e.Filter != nil && e.Filter.S3Key != nil {
				var prefixes, suffixes int
				for _, fr := range e.Filter.S3Key.Rules {
					switch strings.ToLower(fr.Name) {
					case "prefix":
						prefixes++
						r.Prefix = fr.Value
					case "suffix":
						suffixes++
						r.Suffix = fr.Value
					default:
						return invalidArgument("filter rule name must be either prefix or suffix", sigv4.Field{Name: "ArgumentName", Value: "FilterRule"},
							sigv4.Field{Name: "ArgumentValue", Value: fr.Name})
					}
				}
				if prefixes > 1 {
					return invalidArgument("Cannot specify more than one prefix rule in a filter.")
				}
				if suffixes > 1 {
					return invalidArgument("Cannot specify more than one suffix rule in a filter.")
				}
			}
			rules = append(rules, r)
		}
		return nil
	}
	if e := add("queue", doc.Queues); e != nil {
		return nil, e
	}
	if e := add("topic", doc.Topics); e != nil {
		return nil, e
	}
	ids := map[string]bool{}
	for i, a := range rules {
		if ids[a.ID] {
			return nil, invalidArgument("Configuration Ids must be unique", sigv4.Field{Name: "ArgumentName", Value: "Id"},
				sigv4.Field{Name: "ArgumentValue", Value: a.ID})
		}
		ids[a.ID] = true
		for _, b := range rules[:i] {
			if rulesOverlap(a, b) {
				return nil, invalidArgument("Configurations overlap. Configurations on the same bucket cannot share a common event type.")
			}
		}
	}
	return rules, nil
}

// rulesOverlap: some key could match both rules' filters for some event type
// both name (S3 refuses such a pair, whatever their destinations).
func rulesOverlap(a, b NotificationRule) bool {
	if !(strings.HasPrefix(a.Prefix, b.Prefix) || strings.HasPrefix(b.Prefix, a.Prefix)) {
		return false
	}
	if !(strings.HasSuffix(a.Suffix, b.Suffix) || strings.HasSuffix(b.Suffix, a.Suffix)) {
		return false
	}
	for _, x := range a.Events {
		for _, y := range b.Events {
			if eventsOverlap(x, y) {
				return true
			}
		}
	}
	return false
}

func eventsOverlap(x, y string) bool {
	if x == y {
		return true
	}
	xf, xw := strings.CutSuffix(x, "*")
	yf, yw := strings.CutSuffix(y, "*")
	return (xw && strings.HasPrefix(y, xf)) || (yw && strings.HasPrefix(x, yf))
}

var errNotificationsOff = newAPIError("NotImplemented", http.StatusNotImplemented,
	"This gateway keeps no notification configurations.")

// putBucketNotification replaces the bucket's configuration in the catalog.
func (s *Server) putBucketNotification(ctx *fasthttp.RequestCtx, r *request) *apiError {
	if s.deps.Notifications == nil {
		return errNotificationsOff
	}
	body, err := s.smallBody(ctx, r)
	if err != nil {
		return asAPIError(err)
	}
	rules, e := parseNotificationConfig(body)
	if e != nil {
		return e
	}
	if e := s.bucketExists(r); e != nil {
		return e
	}
	dctx, cancel := s.dbctx()
	defer cancel()
	err = s.deps.Notifications.SetBucketNotifications(dctx, r.bucket, rules)
	var unknown *UnknownTargetsError
	if errors.As(err, &unknown) {
		var fields []sigv4.Field
		for i, arn := range unknown.ARNs {
			n := strconv.Itoa(i + 1)
			fields = append(fields, sigv4.Field{Name: "ArgumentName" + n, Value: arn},
				sigv4.Field{Name: "ArgumentValue" + n, Value: "The destination does not exist"})
		}
		return invalidArgument("Unable to validate the following destination configurations", fields...)
	}
	if err != nil {
		s.deps.Log.Warn("could not store a bucket's notification configuration", "bucket", r.bucket, "err", err)
		return errInternal
	}
	ctx.Response.Header.DisableNormalizing()
	ctx.SetStatusCode(http.StatusOK)
	ctx.Response.Header.Set("x-amz-request-id", r.id)
	return nil
}

// getBucketNotification answers the bucket's configuration from the catalog.
func (s *Server) getBucketNotification(ctx *fasthttp.RequestCtx, r *request) *apiError {
	if s.deps.Notifications == nil {
		return errNotificationsOff
	}
	if e := s.bucketExists(r); e != nil {
		return e
	}
	dctx, cancel := s.dbctx()
	defer cancel()
	rules, err := s.deps.Notifications.BucketNotifications(dctx, r.bucket)
	if err != nil {
		s.deps.Log.Warn("could not read a bucket's notification configuration", "bucket", r.bucket, "err", err)
		return errInternal
	}
	ctx.Response.Header.DisableNormalizing()
	ctx.SetStatusCode(http.StatusOK)
	ctx.SetContentType("application/xml")
	ctx.Response.Header.Set("x-amz-request-id", r.id)
	ctx.SetBody(appendNotificationConfig(nil, rules))
	return nil
}

func appendNotificationConfig(b []byte, rules []NotificationRule) []byte {
	b = append(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<NotificationConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`...)
	for _, kind := range []string{"queue", "topic"} {
		tag, dest := "QueueConfiguration", "Queue"
		if kind == "topic" {
			tag, dest = "TopicConfiguration", "Topic"
		}
		for _, r := range rules {
			if r.Kind != kind {
				continue
			}
			b = append(b, "<"+tag+"><Id>"...)
			b = appendXMLEscaped(b, r.ID)
			b = append(b, "</Id><"+dest+">"...)
			b = appendXMLEscaped(b, r.ARN)
			b = append(b, "</"+dest+">"...)
			for _, ev := range r.Events {
				b = append(b, "<Event>"...)
				b = appendXMLEscaped(b, ev)
				b = append(b, "</Event>"...)
			}
			if r.Prefix != "" || r.Suffix != "" {
				b = append(b, "<Filter><S3Key>"...)
				for _, fr := range []filterRuleXML{{"prefix", r.Prefix}, {"suffix", r.Suffix}} {
					if fr.Value != "" {
						b = append(b, "<FilterRule><Name>"+fr.Name+"</Name><Value>"...)
						b = appendXMLEscaped(b, fr.Value)
						b = append(b, "</Value></FilterRule>"...)
					}
				}
				b = append(b, "</S3Key></Filter>"...)
			}
			b = append(b, "</"+tag+">"...)
		}
	}
	return append(b, "</NotificationConfiguration>"...)
}

// bucketExists asks the store, so a configuration of a bucket that does not
// exist is answered NoSuchBucket as S3 does, and never stored.
func (s *Server) bucketExists(r *request) *apiError {
	ctx, cancel := context.WithTimeout(context.Background(), s.leases.Config().DBTimeout)
	defer cancel()
	req, err := s.store.NewRequest(ctx, http.MethodHead, store.LevelBucket, r.bucket, "", "")
	if err != nil {
		return errInternal
	}
	resp, err := s.store.Send(req, sigv4.EmptySHA256)
	if err != nil {
		return errStoreUnreached
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusNotFound:
		return errNoSuchBucket
	}
	s.deps.Log.Warn("HEAD bucket answered unexpectedly", "bucket", r.bucket, "status", resp.Status)
	return errStoreUnreached
}
