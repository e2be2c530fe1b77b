package conformance

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/meta"
)

// reservationForm is the fields of a reservation's browser form, in a
// stable order, with edit applied (nil: as handed out).
func reservationForm(p *reservations.PostForm, edit map[string]string) []formField {
	names := make([]string, 0, len(p.Fields))
	for n := range p.Fields {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []formField
	for _, n := range names {
		v := p.Fields[n]
		if e, ok := edit[n]; ok {
			v = e
		}
		out = append(out, formField{n, v})
	}
	return out
}

// postReservation posts a reservation's form with file and returns the
// status and S3 error code.
func postReservation(t *testing.T, p *reservations.PostForm, edit map[string]string, file []byte) (int, string) {
	t.Helper()
	bucket := p.URL[strings.LastIndex(p.URL, "/")+1:]
	resp, body := postForm(t, strings.TrimSuffix(p.URL, "/"+bucket), bucket, reservationForm(p, edit), "upload.bin", file)
	return resp.StatusCode, errorCode(body)
}

// TestReservationFormPostCommits: the browser form a reservation hands out
// (through the API, for a key that holds only reserve:BUCKET) uploads under
// it: a multipart/form-data POST of its fields commits the reservation with
// the verified size and ETag, once; the form again is refused. A form of a
// reservation naming a CRC32C commits with its checksum recorded.
func TestReservationFormPostCommits(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	ctx := context.Background()
	reserver, err := k.g.Keys.Create(ctx, "reserver", []meta.Grant{{Bucket: k.bucket, Permission: meta.PermReserve}})
	if err != nil {
		t.Fatal(err)
	}
	c := &reservations.Client{Endpoint: k.g.URL, AccessKey: reserver.ID, SecretKey: reserver.Secret}
	body := []byte("hello")
	r, err := c.Create(ctx, reservations.CreateRequest{Bucket: k.bucket, Key: "form/a.txt", Size: ptr[int64](5),
		SHA256: sha256Base64(body), ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Post == nil || r.Post.URL != k.g.URL+"/"+k.bucket || r.Post.Fields[reservations.Param] != r.ID ||
		r.Post.Fields["key"] != "form/a.txt" || r.Post.Fields["x-amz-checksum-sha256"] != r.SHA256 {
		t.Fatalf("the reservation's form: %+v", r.Post)
	}
	doc, err := base64.StdEncoding.DecodeString(r.Post.Fields["policy"])
	if err != nil {
		t.Fatal(err)
	}
	var policy struct {
		Expiration string `json:"expiration"`
		Conditions []any  `json:"conditions"`
	}
	if err := json.Unmarshal(doc, &policy); err != nil {
		t.Fatal(err)
	}
	if exp, err := time.Parse(time.RFC3339, policy.Expiration); err != nil || exp.Sub(r.ExpiresAt).Abs() > time.Millisecond {
		t.Fatalf("policy expiration %s, reservation expires %s", policy.Expiration, r.ExpiresAt)
	}
	if !strings.Contains(string(doc), `["content-length-range",5,5]`) {
		t.Fatalf("policy %s: no exact content-length-range", doc)
	}

	if status, code := postReservation(t, r.Post, nil, body); status != http.StatusNoContent {
		t.Fatalf("POST: %d %s", status, code)
	}
	got, err := c.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != reservations.Committed || got.Size == nil || *got.Size != 5 || got.ETag == "" || got.Post != nil {
		t.Fatalf("after the POST: %+v", got)
	}
	if sum := k.committedChecksum(t, r.ID); sum != "sha256:"+r.SHA256 {
		t.Fatalf("committed event checksum %q", sum)
	}
	if status, code := postReservation(t, r.Post, nil, body); status != http.StatusForbidden || code != "AccessDenied" {
		t.Fatalf("the form again: %d %s, want 403 AccessDenied", status, code)
	}
	if n := k.published(t, "form/a.txt"); n != 1 {
		t.Fatalf("%d publications, want 1", n)
	}

	crc := k.reserve(t, meta.ReservationRequest{Key: "form/crc", MaxSize: ptr[int64](100), CRC32C: crc32cBase64(body)})
	if status, code := postReservation(t, crc.Post, nil, body); status != http.StatusNoContent {
		t.Fatalf("POST under a CRC32C: %d %s", status, code)
	}
	if st := k.state(t, crc.ID); st.State != meta.ReservationCommitted || *st.Size != 5 {
		t.Fatalf("after the CRC32C POST: %+v", st)
	}
	if sum := k.committedChecksum(t, crc.ID); sum != "crc32c:"+crc.CRC32C {
		t.Fatalf("committed event checksum %q", sum)
	}
}

// TestReservationFormPostRefusals: a form under a reservation whose file is
// over or under its size or not its checksum, a form under another key's
// reservation, under a cancelled or expired one, with the reservation field
// or the policy tampered with, and a form without the field from a key that
// may only reserve, are each refused with S3's error before a request
// reaches the store, publish nothing, and leave the reservation as it was.
func TestReservationFormPostRefusals(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	body := []byte("hello")
	exact := k.reserve(t, meta.ReservationRequest{Key: "f/exact", ExactSize: ptr[int64](5)})
	maxed := k.reserve(t, meta.ReservationRequest{Key: "f/max", MaxSize: ptr[int64](5)})
	summed := k.reserve(t, meta.ReservationRequest{Key: "f/sum", SHA256: sha256Base64(body)})
	crc := k.reserve(t, meta.ReservationRequest{Key: "f/crc", CRC32C: crc32cBase64(body)})
	cancelled := k.reserve(t, meta.ReservationRequest{Key: "f/cancelled"})
	expiring := k.reserve(t, meta.ReservationRequest{Key: "f/expiring", TTL: time.Second})
	if _, err := k.rs.End(context.Background(), cancelled.ID, meta.ReservationCancelled); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	other, err := k.g.Keys.Create(ctx, "other", []meta.Grant{{Bucket: "*", Permission: meta.PermWrite}})
	if err != nil {
		t.Fatal(err)
	}
	otherEP := k.g.Endpoint
	otherEP.AccessKey, otherEP.SecretKey = other.ID, other.Secret
	reserveOnly, err := k.g.Keys.Create(ctx, "reserve-only", []meta.Grant{{Bucket: k.bucket, Permission: meta.PermReserve}})
	if err != nil {
		t.Fatal(err)
	}
	reserveEP := k.g.Endpoint
	reserveEP.AccessKey, reserveEP.SecretKey = reserveOnly.ID, reserveOnly.Secret
	// ownForm is a form signed by ep's key with its own policy, naming key
	// and, when id is not "", the reservation field.
	ownForm := func(ep stack.Endpoint, key, id string) []formField {
		conds := []any{map[string]string{"bucket": k.bucket}, []any{"eq", "$key", key}}
		fields := []formField{{"key", key}}
		if id != "" {
			conds = append(conds, map[string]string{reservations.Param: id})
			fields = append(fields, formField{reservations.Param, id})
		}
		return append(fields, postPolicy(ep, time.Now().Add(time.Hour), conds...)...)
	}
	// The policy re-encoded with another reservation id, under the old signature.
	forged := func() string {
		doc, _ := base64.StdEncoding.DecodeString(exact.Post.Fields["policy"])
		return base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(string(doc), exact.ID, maxed.ID)))
	}()

	time.Sleep(1500 * time.Millisecond) // expiring expires
	type post func() (int, string)
	form := func(p *reservations.PostForm, edit map[string]string, file []byte) post {
		return func() (int, string) { return postReservation(t, p, edit, file) }
	}
	ownFile := func(ep stack.Endpoint, key, id string, file []byte) post {
		return func() (int, string) {
			resp, b := postForm(t, k.g.URL, k.bucket, ownForm(ep, key, id), "upload.bin", file)
			return resp.StatusCode, errorCode(b)
		}
	}
	own := func(ep stack.Endpoint, key, id string) post { return ownFile(ep, key, id, body) }
	cases := []struct {
		name, key string
		do        post
		status    int
		code      string
		id, state string
	}{
		{"longer than exact", "f/exact", form(exact.Post, nil, []byte("hello!")), 400, "EntityTooLarge", exact.ID, meta.ReservationReserved},
		{"shorter than exact", "f/exact", form(exact.Post, nil, []byte("hell")), 400, "EntityTooSmall", exact.ID, meta.ReservationReserved},
		{"over the maximum", "f/max", form(maxed.Post, nil, []byte("hello!")), 400, "EntityTooLarge", maxed.ID, meta.ReservationReserved},
		{"not the reserved SHA-256", "f/sum", form(summed.Post, nil, []byte("jello")), 400, "BadDigest", summed.ID, meta.ReservationReserved},
		{"not the reserved CRC32C", "f/crc", form(crc.Post, nil, []byte("jello")), 400, "BadDigest", crc.ID, meta.ReservationReserved},
		{"checksum field changed", "f/crc", form(crc.Post, map[string]string{"x-amz-checksum-crc32c": crc32cBase64([]byte("jello"))}, []byte("jello")),
			403, "AccessDenied", crc.ID, meta.ReservationReserved},
		{"cancelled", "f/cancelled", form(cancelled.Post, nil, body), 403, "AccessDenied", cancelled.ID, meta.ReservationCancelled},
		{"expired", "f/expiring", form(expiring.Post, nil, body), 403, "AccessDenied", expiring.ID, meta.ReservationReserved},
		{"reservation field tampered", "f/exact", form(exact.Post, map[string]string{reservations.Param: maxed.ID}, body),
			403, "AccessDenied", exact.ID, meta.ReservationReserved},
		{"policy tampered", "f/exact", form(exact.Post, map[string]string{reservations.Param: maxed.ID, "policy": forged}, body),
			403, "SignatureDoesNotMatch", exact.ID, meta.ReservationReserved},
		{"another key's reservation", "f/exact", own(otherEP, "f/exact", exact.ID), 403, "AccessDenied", exact.ID, meta.ReservationReserved},
		{"another key's reservation, its key", "f/max", own(k.g.Endpoint, "f/max", exact.ID), 403, "AccessDenied", exact.ID, meta.ReservationReserved},
		// The reserving key's own policy, without a content-length-range:
		// the reservation's size holds anyway.
		{"own policy, longer than exact", "f/exact", ownFile(k.g.Endpoint, "f/exact", exact.ID, []byte("hello!")), 400, "EntityTooLarge", exact.ID, meta.ReservationReserved},
		{"own policy, shorter than exact", "f/exact", ownFile(k.g.Endpoint, "f/exact", exact.ID, []byte("hell")), 400, "InvalidArgument", exact.ID, meta.ReservationReserved},
		{"own policy, over the maximum", "f/max", ownFile(k.g.Endpoint, "f/max", maxed.ID, []byte("hello!")), 400, "EntityTooLarge", maxed.ID, meta.ReservationReserved},
		{"own policy, no checksum field", "f/sum", ownFile(k.g.Endpoint, "f/sum", summed.ID, body), 400, "BadDigest", summed.ID, meta.ReservationReserved},
		{"no reservation, reserve grant only", "f/free", own(reserveEP, "f/free", ""), 403, "AccessDenied", "", ""},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			before := k.g.StoreRequests.Load()
			status, code := tc.do()
			if status != tc.status || code != tc.code {
				t.Fatalf("%d %s, want %d %s", status, code, tc.status, tc.code)
			}
			if n := k.g.StoreRequests.Load() - before; n != 0 {
				t.Fatalf("%d requests reached the store", n)
			}
			if n := k.published(t, tc.key); n != 0 {
				t.Fatalf("%d publications, want none", n)
			}
			if tc.id != "" {
				if st := k.state(t, tc.id).State; st != tc.state {
					t.Fatalf("reservation %s, want %s", st, tc.state)
				}
			}
		})
	}
	// Refused forms leave the reservation usable.
	if status, code := postReservation(t, exact.Post, nil, body); status != http.StatusNoContent {
		t.Fatalf("the form after the refusals: %d %s", status, code)
	}
	if st := k.state(t, exact.ID).State; st != meta.ReservationCommitted {
		t.Fatalf("reservation %s, want committed", st)
	}
}

// TestReservationsCommandPostForm: `fencegate reservations create --json`
// prints the browser form, and a POST of it commits the reservation.
func TestReservationsCommandPostForm(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	body := []byte("hello")
	cmd := exec.Command(fencegateBinary(t), "reservations", "create", "--bucket", k.bucket, "--key", "cli/form",
		"--size", "5", "--crc64nvme", crc64nvmeBase64(body), "--json")
	cmd.Env = append(os.Environ(), "FENCEGATE_ENDPOINT="+k.g.URL, "AWS_ACCESS_KEY_ID="+k.g.AccessKey,
		"AWS_SECRET_ACCESS_KEY="+k.g.SecretKey, "DATABASE_URL="+testenv.DatabaseURL(t))
	out, err := cmd.CombinedOutput()
	var r reservations.Reservation
	if err != nil || json.Unmarshal(out, &r) != nil || r.Post == nil || r.Post.Fields["x-amz-checksum-crc64nvme"] != r.CRC64NVME {
		t.Fatalf("create: %v %s", err, out)
	}
	if status, code := postReservation(t, r.Post, nil, body); status != http.StatusNoContent {
		t.Fatalf("POST: %d %s", status, code)
	}
	if st := k.state(t, r.ID); st.State != meta.ReservationCommitted || *st.Size != 5 {
		t.Fatalf("after the POST: %+v", st)
	}
}

// TestReservationFormEndedBeforeSend: a form admitted under a live
// reservation whose reservation is cancelled while it waits for its key
// (another holder has it) sends nothing: its acquire's binding refuses it,
// 403 AccessDenied, nothing published or at the store.
func TestReservationFormEndedBeforeSend(t *testing.T) {
	reached := make(chan struct{})
	var once sync.Once
	var bucket string
	k := newReservationKit(t, gatewayOptions{Hooks: lease.Hooks{Waiting: func(b, key string) {
		if b == bucket && key == "held" {
			once.Do(func() { close(reached) })
		}
	}}})
	bucket = k.bucket
	r := k.reserve(t, meta.ReservationRequest{Key: "held", ExactSize: ptr[int64](5)})
	release := k.holdKey(t, "held")
	type answer struct {
		status int
		code   string
	}
	done := make(chan answer, 1)
	go func() {
		status, code := postReservation(t, r.Post, nil, []byte("hello"))
		done <- answer{status, code}
	}()
	within(t, reached, 30*time.Second, "the form waiting for its key")
	if _, err := k.rs.End(context.Background(), r.ID, meta.ReservationCancelled); err != nil {
		t.Fatal(err)
	}
	before := k.g.StoreRequests.Load()
	release()
	res := within(t, done, 30*time.Second, "the form's answer")
	if res.status != 403 || res.code != "AccessDenied" {
		t.Fatalf("POST: %d %s, want 403 AccessDenied", res.status, res.code)
	}
	if n := k.g.StoreRequests.Load() - before; n != 0 {
		t.Fatalf("%d requests reached the store after the bind was refused", n)
	}
	if n := k.published(t, "held"); n != 0 || k.atStore(t, "held") {
		t.Fatalf("%d publications / bytes at the store after a cancelled reservation", n)
	}
}

// TestReservationConcurrentFormsPublishOnce: eight posts of one
// reservation's form at once publish exactly one generation, and the
// gateway counts one commit.
func TestReservationConcurrentFormsPublishOnce(t *testing.T) {
	k := newReservationKit(t, gatewayOptions{})
	r := k.reserve(t, meta.ReservationRequest{Key: "once", ExactSize: ptr[int64](5)})
	form, ctype := formBody(t, reservationForm(r.Post, nil), "once.bin", []byte("hello"))
	var wg sync.WaitGroup
	statuses := make([]int, 8)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(r.Post.URL, ctype, bytes.NewReader(form))
			if err != nil {
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	ok := 0
	for _, s := range statuses {
		if s == http.StatusNoContent {
			ok++
		}
	}
	if ok != 1 || k.published(t, "once") != 1 || k.state(t, r.ID).State != meta.ReservationCommitted {
		t.Fatalf("%d forms succeeded, %d publications (%v)", ok, k.published(t, "once"), statuses)
	}
	if m := metricsOf(t, k.g.Admin); m["fencegate_reservations_committed_total"] != 1 {
		t.Fatalf("fencegate_reservations_committed_total = %v, want 1", m["fencegate_reservations_committed_total"])
	}
}
