package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/iotest"
)

// A request's one log line: its fields, as the JSON log writes them.
func TestRequestLogLine(t *testing.T) {
	line, r := loggedGet(t, 206, &countingBody{n: 1234}, "")
	want := map[string]any{
		"level": "INFO", "msg": "request", "request_id": r.id, "op": "GetObject", "method": "GET",
		"bucket": "bench", "key": "objects/k-000123", "status": 206.0, "bytes_in": 0.0, "bytes_out": 1234.0,
		"remote": "0.0.0.0:0", "access_key": testKey.ID,
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s: %v, want %v", k, line[k], v)
		}
	}
	if _, ok := line["ms"].(float64); !ok {
		t.Errorf("ms: %v, want a number", line["ms"])
	}
	if _, ok := line["time"].(string); !ok {
		t.Errorf("time: %v", line["time"])
	}
	if len(line) != len(want)+2 {
		t.Errorf("fields %v", line)
	}
}

// An answer whose body broke off after its head had gone (the store paused
// mid-body, the client stopped taking it) says why in its log line: the
// status alone (200) would not tell it from a whole answer.
func TestRequestLogLineNamesABrokenBody(t *testing.T) {
	stalled := errors.New("the store did not answer: it sent nothing more of its answer for 2m0s")
	body := &countingBody{rc: io.NopCloser(io.MultiReader(strings.NewReader("part of the body"), iotest.ErrReader(stalled)))}
	if _, err := body.WriteTo(io.Discard); !errors.Is(err, stalled) {
		t.Fatalf("WriteTo: %v", err)
	}
	line, _ := loggedGet(t, 200, body, "")
	if line["status"] != 200.0 || line["bytes_out"] != 16.0 || line["body_error"] != stalled.Error() {
		t.Errorf("status %v, bytes_out %v, body_error %v", line["status"], line["bytes_out"], line["body_error"])
	}
}

// An answer fencegate writes whole itself (an error document, a repeated
// Complete's result) counts its body in bytes_out as a relayed one does:
// the line said 0 for them.
func TestRequestLogLineCountsAWrittenBody(t *testing.T) {
	const doc = "<Error><Code>NoSuchKey</Code></Error>"
	line, _ := loggedGet(t, 404, nil, doc)
	if line["bytes_out"] != float64(len(doc)) {
		t.Errorf("bytes_out %v, want %d", line["bytes_out"], len(doc))
	}
}

// loggedGet is the log line of a GET answered with status and out (or, with
// out nil, the body written), as the JSON log writes it, and the request.
func loggedGet(t *testing.T, status int, out *countingBody, written string) (map[string]any, *request) {
	t.Helper()
	var buf bytes.Buffer
	s := newBenchServer(t, slog.New(slog.NewJSONHandler(&buf, nil)))
	ctx := recordedRequest(t, "GET", "/bench/objects/k-000123", nil)
	r, e := s.admit(ctx)
	if e != nil {
		t.Fatal(e)
	}
	ctx.Response.SetStatusCode(status)
	if out != nil {
		r.out = out
	}
	if written != "" {
		ctx.Response.SetBodyString(written)
	}
	s.finish(ctx, r, nil)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	return line, r
}
