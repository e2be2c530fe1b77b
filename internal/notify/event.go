// Package notify delivers event notifications (docs/NOTIFICATIONS.md): each
// target's queue, filled from the outbox in the committing transaction, is
// sent to its webhook or NATS JetStream subject at least once, each key's
// events in generation order, by whichever gateway holds the target's claim.
// It knows no SQL: the queue is an interface meta implements.
package notify

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Event is one queued event of one target.
type Event struct {
	QueueID     int64 // the queue row; order per key
	Target      string
	OutboxID    int64  // the event's id: the same for every target and every try
	Name        string // "ObjectCreated:Put", "ObjectRemoved:Delete", ...
	Bucket, Key string
	Generation  int64
	ETag        string
	Size        int64
	AttemptID   string // the write attempt whose bytes these are ("" for external)
	CommittedAt time.Time
	Tries       int // failed tries so far
}

// ID is the event's id: consumers deduplicate by it, JetStream as its
// Nats-Msg-Id. The outbox row's id, unique per committed generation.
func (e Event) ID() string { return strconv.FormatInt(e.OutboxID, 10) }

// Sequencer orders one key's events as S3's does: fixed-width hex of the
// generation, so comparing two of the same key as strings compares them.
func (e Event) Sequencer() string { return fmt.Sprintf("%016X", e.Generation) }

type record struct {
	EventVersion string `json:"eventVersion"`
	EventSource  string `json:"eventSource"`
	AWSRegion    string `json:"awsRegion"`
	EventTime    string `json:"eventTime"`
	EventName    string `json:"eventName"`
	S3           struct {
		SchemaVersion string `json:"s3SchemaVersion"`
		Bucket        struct {
			Name string `json:"name"`
			ARN  string `json:"arn"`
		} `json:"bucket"`
		Object struct {
			Key       string `json:"key"`
			Size      int64  `json:"size,omitempty"`
			ETag      string `json:"eTag,omitempty"`
			VersionID string `json:"versionId,omitempty"`
			Sequencer string `json:"sequencer"`
		} `json:"object"`
	} `json:"s3"`
	Fencegate struct {
		EventID    string `json:"eventId"`
		Generation int64  `json:"generation"`
		AttemptID  string `json:"attemptId,omitempty"`
		Try        int    `json:"deliveryTry"`
		Target     string `json:"target"`
	} `json:"fencegate"`
}

// Body is the event in S3's notification format, one record:
// {"Records":[{...}]}. The key is URL-encoded as S3 encodes it.
func (e Event) Body() []byte {
	var r record
	r.EventVersion, r.EventSource, r.EventName = "2.1", "fencegate:s3", e.Name
	r.EventTime = e.CommittedAt.UTC().Format("2006-01-02T15:04:05.000Z")
	r.S3.SchemaVersion = "1.0"
	r.S3.Bucket.Name, r.S3.Bucket.ARN = e.Bucket, "arn:aws:s3:::"+e.Bucket
	r.S3.Object.Key = strings.ReplaceAll(url.QueryEscape(e.Key), "%2F", "/")
	r.S3.Object.Size, r.S3.Object.ETag = e.Size, e.ETag
	r.S3.Object.Sequencer = e.Sequencer()
	r.Fencegate.EventID, r.Fencegate.Generation, r.Fencegate.AttemptID = e.ID(), e.Generation, e.AttemptID
	r.Fencegate.Try, r.Fencegate.Target = e.Tries+1, e.Target
	b, err := json.Marshal(struct {
		Records []record `json:"Records"`
	}{[]record{r}})
	if err != nil {
		panic(err) // strings and numbers only
	}
	return b
}
