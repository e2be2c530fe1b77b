package notify

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A webhook's URL often carries its credential (a token in the path, as
// chat hooks do, or in the query): a failed delivery's error, which goes to
// the log and to the dead letter's record, names the target's host only.
func TestWebhookErrorsHideTheURLsSecret(t *testing.T) {
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	defer refusing.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	for _, base := range []string{refusing.URL, closed} {
		s, err := newSender(Target{Name: "hook", Kind: "webhook", URL: base + "/services/T0/B0/pathsecret?token=querysecret"}, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		err = s.send(context.Background(), Event{})
		s.close()
		if err == nil {
			t.Fatalf("%s: delivery succeeded", base)
		}
		msg := err.Error()
		if strings.Contains(msg, "pathsecret") || strings.Contains(msg, "querysecret") || !strings.Contains(msg, strings.TrimPrefix(base, "http://")) {
			t.Errorf("%s: delivery error %q: want the host, not the path or the query", base, msg)
		}
	}
}
