package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Target is a delivery target as the service needs it, its secret opened.
type Target struct {
	Name    string
	Kind    string // "webhook" or "nats"
	URL     string
	Subject string
	Secret  string
}

// sender delivers one event; nil means the target acknowledged it.
type sender interface {
	send(ctx context.Context, e Event) error
	close()
}

// SignatureHeader carries a webhook body's HMAC-SHA256 under the target's
// secret: "sha256=" and its hex.
const SignatureHeader = "X-Fencegate-Signature"

// Sign is the SignatureHeader value of body under secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

type webhook struct {
	t      Target
	client *http.Client
}

// send posts e. Its errors, which reach the log and the dead letter's
// record, name the target's host only: a webhook's URL often carries its
// credential in the path (chat hooks) or the query.
func (w *webhook) send(ctx context.Context, e Event) error {
	body := e.Body()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.t.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook %s: its URL does not make a request", w.t.Name) // the error would quote it
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Fencegate-Event-Id", e.ID())
	if w.t.Secret != "" {
		req.Header.Set(SignatureHeader, Sign(w.t.Secret, body))
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // ue names the whole URL
		}
		return fmt.Errorf("webhook at %s: %w", req.URL.Host, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook at %s answered %s", req.URL.Host, resp.Status)
	}
	return nil
}

func (w *webhook) close() { w.client.CloseIdleConnections() }

// jetStream publishes to a subject some stream of the server captures; the
// event id is the Nats-Msg-Id, so JetStream drops a resend within its
// duplicate window.
type jetStream struct {
	t       Target
	timeout time.Duration
	mu      sync.Mutex
	nc      *nats.Conn
	js      jetstream.JetStream
}

func (j *jetStream) conn() (jetstream.JetStream, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.nc != nil && !j.nc.IsClosed() {
		return j.js, nil
	}
	nc, err := nats.Connect(j.t.URL, nats.Name("fencegate"), nats.Timeout(j.timeout),
		nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond), nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	j.nc, j.js = nc, js
	return js, nil
}

func (j *jetStream) send(ctx context.Context, e Event) error {
	js, err := j.conn()
	if err != nil {
		return err
	}
	msg := nats.NewMsg(j.t.Subject)
	msg.Data = e.Body()
	msg.Header.Set(jetstream.MsgIDHeader, e.ID())
	_, err = js.PublishMsg(ctx, msg)
	return err
}

func (j *jetStream) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.nc != nil {
		j.nc.Close()
		j.nc = nil
	}
}

func newSender(t Target, timeout time.Duration) (sender, error) {
	switch t.Kind {
	case "webhook":
		return &webhook{t: t, client: &http.Client{Timeout: timeout}}, nil
	case "nats":
		return &jetStream{t: t, timeout: timeout}, nil
	}
	return nil, fmt.Errorf("target %s: unknown kind %q", t.Name, t.Kind)
}
