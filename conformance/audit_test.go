package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/stack"
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
func audit(t *testing.T, store stack.Endpoint, bucket string, keys ...string) {
	t.Helper()
	ctx := context.Background()
	c := store.S3Client()
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
			t.Errorf("audit %s: catalog has generation %d (etag %s) but the store has nothing", key, row.Generation, row.ETag)
		case !absent && (!known || row.Deleted):
			t.Errorf("audit %s: the store holds %s but the catalog has no live generation (%+v)", key, aws.ToString(head.ETag), row)
		case !absent:
			etag := trimQuotes(aws.ToString(head.ETag))
			attempt := head.Metadata["fencegate-attempt"]
			if strings.HasSuffix(key, "/") && attempt == "" {
				attempt = row.Attempt // SeaweedFS keeps no metadata on directory markers
			}
			if etag != row.ETag || attempt != row.Attempt {
				t.Errorf("audit %s: store etag %s attempt %s, catalog etag %s attempt %s (generation %d)", key, etag, attempt, row.ETag, row.Attempt, row.Generation)
			}
		}
		if n := attemptStates(t, bucket, key)["leased"]; n != 0 {
			t.Errorf("audit %s: %d attempts left leased", key, n)
		}
		gens := generationsOf(t, bucket, key)
		for i := 1; i < len(gens); i++ {
			if gens[i].Generation <= gens[i-1].Generation {
				t.Errorf("audit %s: generations not increasing: %v", key, gens)
			}
		}
		if known && len(gens) > 0 && gens[len(gens)-1].Generation != row.Generation {
			t.Errorf("audit %s: catalog generation %d is not the last (%d)", key, row.Generation, gens[len(gens)-1].Generation)
		}
	}
}

func trimQuotes(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}
