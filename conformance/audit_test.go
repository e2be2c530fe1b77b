package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/lease"
)

// catalogRow is a key's catalog entry.
type catalogRow struct {
	Generation int64
	ETag       string
	Attempt    string
	Deleted    bool
	Origin     string
}

func catalogOf(t *testing.T, bucket, key string) (catalogRow, bool) {
	t.Helper()
	var c catalogRow
	err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT generation, coalesce(etag, ''), coalesce(attempt_id::text, ''), deleted, origin
		FROM catalog WHERE bucket = $1 AND key = $2`, bucket, key).Scan(&c.Generation, &c.ETag, &c.Attempt, &c.Deleted, &c.Origin)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return c, true
}

// generationsOf lists a key's generations in order.
func generationsOf(t *testing.T, bucket, key string) []catalogRow {
	t.Helper()
	rows, err := packageKeys(t).Pool.Query(context.Background(), `SELECT generation, coalesce(etag, ''), coalesce(attempt_id::text, ''), deleted, origin
		FROM generations WHERE bucket = $1 AND key = $2 ORDER BY generation`, bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (catalogRow, error) {
		var c catalogRow
		err := r.Scan(&c.Generation, &c.ETag, &c.Attempt, &c.Deleted, &c.Origin)
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// attemptStates counts a key's attempts by state.
func attemptStates(t *testing.T, bucket, key string) map[string]int {
	t.Helper()
	rows, err := packageKeys(t).Pool.Query(context.Background(), `SELECT state, count(*) FROM attempts WHERE bucket = $1 AND key = $2 GROUP BY state`, bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

func attemptState(t *testing.T, id string) string {
	t.Helper()
	var s string
	if err := packageKeys(t).Pool.QueryRow(context.Background(), `SELECT state FROM attempts WHERE attempt_id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// audit checks, for each key, that the catalog equals what the store holds
// (ETag and the attempt id on the bytes; absent for a delete marker or no row),
// that no attempt is left leased, and that generations strictly increase.
// TestAuditReportsPlantedDivergence shows it catches each kind.
func audit(t *testing.T, store stack.Endpoint, bucket string, keys ...string) {
	t.Helper()
	for _, p := range auditFindings(t, store, bucket, keys...) {
		t.Error(p)
	}
}

// auditFindings is audit's check; it returns the divergences it found.
func auditFindings(t *testing.T, store stack.Endpoint, bucket string, keys ...string) []string {
	t.Helper()
	ctx := context.Background()
	c := store.S3Client()
	var out []string
	report := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for _, key := range keys {
		row, known := catalogOf(t, bucket, key)
		head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(key)})
		var ae smithy.APIError
		absent := errors.As(err, &ae) && (ae.ErrorCode() == "NotFound" || ae.ErrorCode() == "NoSuchKey")
		if err != nil && !absent {
			t.Fatalf("audit HEAD %s: %v", key, err)
		}
		switch {
		case absent && known && !row.Deleted:
			report("audit %s: catalog has generation %d (etag %s) but the store has nothing", key, row.Generation, row.ETag)
		case !absent && (!known || row.Deleted):
			report("audit %s: the store holds %s but the catalog has no live generation (%+v)", key, aws.ToString(head.ETag), row)
		case !absent:
			etag := trimQuotes(aws.ToString(head.ETag))
			attempt, tagged := head.Metadata["fencegate-attempt"]
			if etag != row.ETag {
				report("audit %s: store etag %s, catalog etag %s (generation %d)", key, etag, row.ETag, row.Generation)
			}
			switch {
			case tagged && attempt != row.Attempt:
				report("audit %s: store attempt %s, catalog attempt %s (generation %d)", key, attempt, row.Attempt, row.Generation)
			case !tagged && strings.HasSuffix(key, "/"):
				// SeaweedFS keeps no metadata on directory markers: the bytes
				// cannot name their attempt, so the catalog's must at least be
				// an attempt at this key that was committed or adopted (or the
				// generation is external, with no attempt).
				if row.Attempt != "" {
					var b, k, st string
					err := packageKeys(t).Pool.QueryRow(ctx, `SELECT bucket, key, state FROM attempts WHERE attempt_id = $1`, row.Attempt).Scan(&b, &k, &st)
					if err != nil || b != bucket || k != key || (st != "committed" && st != "adopted") {
						report("audit %s: catalog attempt %s is not a finished attempt at this key (%s/%s %s, %v)", key, row.Attempt, b, k, st, err)
					}
				} else if row.Origin != "external" {
					report("audit %s: catalog generation %d (%s) names no attempt", key, row.Generation, row.Origin)
				}
			case !tagged && row.Attempt != "":
				report("audit %s: the store's bytes carry no attempt id, catalog attempt %s (generation %d)", key, row.Attempt, row.Generation)
			}
		}
		if n := attemptStates(t, bucket, key)["leased"]; n != 0 {
			report("audit %s: %d attempts left leased", key, n)
		}
		gens := generationsOf(t, bucket, key)
		for i := 1; i < len(gens); i++ {
			if gens[i].Generation <= gens[i-1].Generation {
				report("audit %s: generations not increasing: %v", key, gens)
			}
		}
		if known && len(gens) > 0 && gens[len(gens)-1].Generation != row.Generation {
			report("audit %s: catalog generation %d is not the last (%d)", key, row.Generation, gens[len(gens)-1].Generation)
		}
	}
	return out
}

func trimQuotes(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

// audit() is the oracle of most protocol tests: it must see each kind of
// divergence between the catalog and the store. Keys written through a
// gateway are then changed behind its back, one kind each, and every change,
// and nothing else, is reported.
func TestAuditReportsPlantedDivergence(t *testing.T) {
	g := startGateway(t, gatewayOptions{Lease: testLease})
	ctx := context.Background()
	bucket := "t-audit-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	keys := []string{"clean", "missing", "etag", "foreign", "leased", "dir/"}
	for _, k := range keys {
		body := []byte("body of " + k)
		if strings.HasSuffix(k, "/") {
			body = nil
		}
		if r := putRaw(g.Endpoint, bucket, k, body, nil); r.Status != 200 {
			t.Fatalf("PUT %s: %+v", k, r)
		}
	}
	if f := auditFindings(t, g.Store, bucket, append(keys, "extra")...); len(f) != 0 {
		t.Fatalf("audit of keys written through the gateway: %v", f)
	}
	st := g.Store.S3Client()
	put := func(key, body string, meta map[string]string) {
		t.Helper()
		if _, err := st.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(key), Body: strings.NewReader(body), Metadata: meta}); err != nil {
			t.Fatal(err)
		}
	}
	etagRow, _ := catalogOf(t, bucket, "etag")
	foreignRow, _ := catalogOf(t, bucket, "foreign")
	// missing object
	if _, err := st.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("missing")}); err != nil {
		t.Fatal(err)
	}
	// extra object
	put("extra", "written straight at the store", nil)
	// different ETag, same attempt id
	put("etag", "other bytes", map[string]string{"fencegate-attempt": etagRow.Attempt})
	// same bytes (same ETag), a foreign attempt id
	put("foreign", "body of foreign", map[string]string{"fencegate-attempt": lease.NewID()})
	if got := headETag(t, g.Store, bucket, "foreign"); got != foreignRow.ETag {
		t.Fatalf("the foreign plant changed the ETag (%s, was %s): it would not isolate the attempt check", got, foreignRow.ETag)
	}
	// an attempt left leased
	var leasedAttempt string
	if err := packageKeys(t).Pool.QueryRow(ctx, `UPDATE attempts SET state = 'leased' WHERE bucket = $1 AND key = 'leased' RETURNING attempt_id::text`, bucket).Scan(&leasedAttempt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		packageKeys(t).Pool.Exec(context.Background(), `UPDATE attempts SET state = 'failed' WHERE attempt_id = $1`, leasedAttempt)
	})
	// a directory marker (no metadata at SeaweedFS) whose catalog row names
	// another key's attempt
	if _, err := packageKeys(t).Pool.Exec(ctx, `UPDATE catalog SET attempt_id = $3 WHERE bucket = $1 AND key = $2`, bucket, "dir/", foreignRow.Attempt); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{
		"missing": "the store has nothing",
		"extra":   "no live generation",
		"etag":    "store etag",
		"foreign": "store attempt",
		"leased":  "left leased",
		"dir/":    "not a finished attempt at this key",
	}
	for _, k := range append(keys, "extra") {
		f := auditFindings(t, g.Store, bucket, k)
		w, planted := want[k]
		switch {
		case !planted && len(f) != 0:
			t.Errorf("%s: nothing planted, audit reports %v", k, f)
		case planted && len(f) == 0:
			t.Errorf("%s: planted %q, audit reports nothing", k, w)
		case planted && !strings.Contains(strings.Join(f, "\n"), w):
			t.Errorf("%s: planted %q, audit reports %v", k, w, f)
		}
	}
}

func headETag(t *testing.T, ep stack.Endpoint, bucket, key string) string {
	t.Helper()
	h, err := ep.S3Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	return trimQuotes(aws.ToString(h.ETag))
}
