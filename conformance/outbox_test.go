package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/internal/testenv"
)

// The outbox has one event per committed generation, in commit order per key,
// and the claim-and-delete consumer of docs/OUTBOX.md reads each exactly once
// while writers commit concurrently, across a consumer whose connection is
// killed mid-batch and a batch that is rolled back.
func TestOutboxEventsExactlyOnce(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	bucket := "t-outbox-" + randomSuffix()
	if _, err := g.S3Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	pool := packageKeys(t).Pool
	// The consumer's own table: its effect, written in the transaction that
	// claims the events. The primary key rejects a second delivery.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS outbox_test_consumed (
		seq        bigserial,
		bucket     text NOT NULL,
		key        text NOT NULL,
		generation bigint NOT NULL,
		outbox_id  bigint NOT NULL,
		consumer   int NOT NULL,
		PRIMARY KEY (bucket, key, generation))`); err != nil {
		t.Fatal(err)
	}

	const writers, opsEach = 8, 25
	keys := []string{"a", "b", "c", "d", "e", "f"}
	total := int64(writers * opsEach)
	var progress atomic.Int64
	var writersDone atomic.Bool

	c := &outboxConsumer{url: testenv.DatabaseURL(t), bucket: bucket}
	if err := c.connect(ctx); err != nil {
		t.Fatal(err)
	}
	consumed := make(chan error, 1)
	go func() { consumed <- c.run(ctx, pool, &progress, total, &writersDone) }()

	// Writers: PUTs and some DELETEs on shared keys; each acknowledged write's
	// generation is remembered.
	var mu sync.Mutex
	acked := map[string]bool{}
	var slowDowns atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := g.S3Client()
			for i := 0; i < opsEach; i++ {
				key := keys[(w+i)%len(keys)]
				var meta middleware.Metadata
				var err error
				isDelete := i%6 == 5
				if isDelete {
					var out *s3.DeleteObjectOutput
					out, err = client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key})
					if err == nil {
						meta = out.ResultMetadata
					}
				} else {
					body := []byte(fmt.Sprintf("writer %d op %d %s", w, i, strings.Repeat("x", 100*i)))
					var out *s3.PutObjectOutput
					out, err = client.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(body)})
					if err == nil {
						meta = out.ResultMetadata
					}
				}
				progress.Add(1)
				if httpStatus(err) == 503 {
					slowDowns.Add(1)
					continue
				}
				if err != nil {
					t.Errorf("writer %d op %d on %s: %v", w, i, key, err)
					continue
				}
				gen := generationOf(meta)
				if gen == "" && isDelete {
					continue // the key was already deleted: nothing changed, no generation
				}
				if gen == "" {
					t.Errorf("writer %d op %d on %s: no x-fencegate-generation", w, i, key)
					continue
				}
				mu.Lock()
				acked[key+"/"+gen] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	writersDone.Store(true)
	t.Logf("%d writes by %d writers in %s (%d gave up with 503 SlowDown)", total, writers, time.Since(start).Round(time.Millisecond), slowDowns.Load())
	select {
	case err := <-consumed:
		if err != nil {
			t.Fatalf("consumer: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("consumer did not drain the outbox within 60 s of the last write")
	}
	t.Logf("consumer: %d committed batches on %d connections; killed mid-batch with %d events read, rolled back a batch of %d; "+
		"%d events arrived below an earlier batch's highest id (a `WHERE id > cursor` reader would have skipped them); %d NOTIFY wake-ups",
		c.batches, c.connections, len(c.killedIDs), len(c.rolledBackIDs), c.behind, c.notified)

	// Both restarts happened while writers were still committing, or at least
	// with events outstanding, and the events they had read came back.
	if len(c.killedIDs) == 0 || len(c.rolledBackIDs) == 0 {
		t.Fatalf("the consumer restarts did not happen: killed %v, rolled back %v", c.killedIDs, c.rolledBackIDs)
	}
	t.Logf("restarts at writer progress %d/%d (kill) and %d/%d (rollback)", c.killedAt, total, c.rolledBackAt, total)

	type ev struct {
		key             string
		generation, oid int64
	}
	rows, err := pool.Query(ctx, `SELECT key, generation, outbox_id FROM outbox_test_consumed WHERE bucket = $1 ORDER BY seq`, bucket)
	if err != nil {
		t.Fatal(err)
	}
	var got []ev
	for rows.Next() {
		var e ev
		if err := rows.Scan(&e.key, &e.generation, &e.oid); err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Exactly the committed generations, each once.
	gens := map[string]bool{}
	grows, err := pool.Query(ctx, `SELECT key, generation FROM generations WHERE bucket = $1`, bucket)
	if err != nil {
		t.Fatal(err)
	}
	for grows.Next() {
		var k string
		var n int64
		if err := grows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		gens[k+"/"+strconv.FormatInt(n, 10)] = true
	}
	seenGen, seenID := map[string]bool{}, map[int64]bool{}
	for _, e := range got {
		id := e.key + "/" + strconv.FormatInt(e.generation, 10)
		if seenGen[id] || seenID[e.oid] {
			t.Errorf("event %s (outbox id %d) consumed twice", id, e.oid)
		}
		seenGen[id], seenID[e.oid] = true, true
		if !gens[id] {
			t.Errorf("consumed %s, which is no committed generation", id)
		}
	}
	for id := range gens {
		if !seenGen[id] {
			t.Errorf("committed generation %s was never consumed", id)
		}
	}
	if len(got) != len(gens) {
		t.Errorf("consumed %d events for %d committed generations", len(got), len(gens))
	}
	for id := range acked {
		if !gens[id] {
			t.Errorf("a client was told generation %s, which is not in the generations table", id)
		}
	}
	for _, ids := range [][]int64{c.killedIDs, c.rolledBackIDs} {
		for _, oid := range ids {
			if !seenID[oid] {
				t.Errorf("outbox id %d, read in an uncommitted batch, was never consumed afterwards", oid)
			}
		}
	}
	// Per key, consumption order is generation order and outbox id order.
	last := map[string]ev{}
	perKey := map[string]int{}
	for _, e := range got {
		if p, ok := last[e.key]; ok && (e.generation <= p.generation || e.oid <= p.oid) {
			t.Errorf("key %s: consumed generation %d (id %d) after generation %d (id %d)", e.key, e.generation, e.oid, p.generation, p.oid)
		}
		last[e.key] = e
		perKey[e.key]++
	}
	t.Logf("%d events consumed exactly once; per key: %v", len(got), perKey)
	for _, k := range keys {
		if perKey[k] < 2 {
			t.Errorf("key %s has %d generations; the test wants several per key", k, perKey[k])
		}
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE bucket = $1`, bucket).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d outbox rows left for the bucket (%v)", left, err)
	}
	if c.notified == 0 {
		t.Error("the consumer never got a fencegate_outbox notification for its bucket")
	}
	audit(t, g.Store, bucket, keys...)
}

// generationOf reads x-fencegate-generation from an SDK result.
func generationOf(md middleware.Metadata) string {
	if r, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response); ok {
		return r.Header.Get("x-fencegate-generation")
	}
	return ""
}

// outboxConsumer is the documented consumer (docs/OUTBOX.md): claim and delete
// a batch of the bucket's events and record their effect, in one transaction
// on its own connection.
type outboxConsumer struct {
	url, bucket string
	conn        *pgx.Conn
	connections int

	batches  int
	maxID    int64 // highest outbox id of any committed batch so far
	behind   int   // events below an earlier batch's maxID
	notified int

	killedIDs, rolledBackIDs []int64
	killedAt, rolledBackAt   int64
}

type outboxEvent struct {
	id, generation int64
	key            string
}

func (c *outboxConsumer) connect(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `LISTEN fencegate_outbox`); err != nil {
		conn.Close(ctx)
		return err
	}
	c.conn = conn
	c.connections++
	return nil
}

// claim opens the consumer's transaction and deletes up to 50 of the bucket's
// events in it, oldest id first, skipping rows another consumer holds.
func (c *outboxConsumer) claim(ctx context.Context) (pgx.Tx, []outboxEvent, error) {
	tx, err := c.conn.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	rows, err := tx.Query(ctx, `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox WHERE bucket = $1 ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED)
		RETURNING id, key, generation`, c.bucket)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, nil, err
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxEvent, error) {
		var e outboxEvent
		err := r.Scan(&e.id, &e.key, &e.generation)
		return e, err
	})
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, nil, err
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].id < evs[j].id }) // RETURNING has no order
	return tx, evs, nil
}

// apply records the batch's effect and commits: the effect and the deletion
// of the events are one transaction.
func (c *outboxConsumer) apply(ctx context.Context, tx pgx.Tx, evs []outboxEvent) error {
	for _, e := range evs {
		if _, err := tx.Exec(ctx, `INSERT INTO outbox_test_consumed (bucket, key, generation, outbox_id, consumer)
			VALUES ($1, $2, $3, $4, $5)`, c.bucket, e.key, e.generation, e.id, c.connections); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
	}
	return tx.Commit(ctx)
}

// run consumes until the writers are done and the bucket's outbox is empty.
// Once a third of the writes are done, the first non-empty batch's connection
// is terminated before its commit (a consumer crash); once two thirds are,
// a batch is rolled back. Both must leave their events for the next claim.
func (c *outboxConsumer) run(ctx context.Context, pool interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}, progress *atomic.Int64, total int64, writersDone *atomic.Bool) error {
	defer func() { c.conn.Close(ctx) }()
	for {
		done := writersDone.Load() // before the claim: every acknowledged commit is visible to it
		tx, evs, err := c.claim(ctx)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			if err := tx.Rollback(ctx); err != nil {
				return err
			}
			if done {
				return nil
			}
			if err := c.wait(ctx, 200*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		ids := make([]int64, len(evs))
		for i, e := range evs {
			ids[i] = e.id
		}
		switch p := progress.Load(); {
		case c.killedIDs == nil && p >= total/3:
			// The consumer dies holding the batch: its backend is terminated
			// with the DELETE uncommitted.
			c.killedIDs, c.killedAt = ids, p
			pid := c.conn.PgConn().PID()
			if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				return err
			}
			if err := c.apply(ctx, tx, evs); err == nil {
				return errors.New("a batch committed on a terminated connection")
			}
			c.conn.Close(ctx)
			// Wait for the old backend to be gone (its locks with it), then
			// start again on a new connection.
			for {
				var n int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := c.connect(ctx); err != nil {
				return err
			}
			continue
		case c.killedIDs != nil && c.rolledBackIDs == nil && p >= 2*total/3:
			c.rolledBackIDs, c.rolledBackAt = ids, p
			if err := tx.Rollback(ctx); err != nil {
				return err
			}
			continue
		}
		if err := c.apply(ctx, tx, evs); err != nil {
			return fmt.Errorf("batch of %d events (ids %d..%d): %w", len(evs), evs[0].id, evs[len(evs)-1].id, err)
		}
		c.batches++
		reread := map[int64]bool{}
		for _, id := range append(append([]int64{}, c.killedIDs...), c.rolledBackIDs...) {
			reread[id] = true
		}
		for _, e := range evs {
			if e.id < c.maxID && !reread[e.id] {
				c.behind++ // committed after a higher id was already consumed
			}
		}
		if m := evs[len(evs)-1].id; m > c.maxID {
			c.maxID = m
		}
	}
}

// wait blocks until a fencegate_outbox notification or the timeout: a wake-up
// only; the next claim reads what is there.
func (c *outboxConsumer) wait(ctx context.Context, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	n, err := c.conn.WaitForNotification(wctx)
	if err != nil {
		if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		return err
	}
	if strings.HasPrefix(n.Payload, c.bucket+"/") {
		c.notified++
	}
	return nil
}

// A committed write wakes a listening consumer with the key as payload, after
// the commit (the wake-up is not part of the committing transaction).
func TestOutboxWakeUpAfterCommit(t *testing.T) {
	g := startGateway(t, gatewayOptions{})
	ctx := context.Background()
	bucket := "t-wake-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `LISTEN fencegate_outbox`); err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"a", "dir/b c"} {
		if r := putRaw(g.Endpoint, bucket, key, []byte("x"), nil); r.Status != 200 {
			t.Fatalf("PUT %s: %+v", key, r)
		}
		// Other tests' gateways share the database: skip their wake-ups.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		for {
			n, err := conn.WaitForNotification(wctx)
			if err != nil {
				cancel()
				t.Fatalf("write %d: no wake-up for %s/%s within 5 s: %v", i, bucket, key, err)
			}
			if n.Channel != "fencegate_outbox" {
				t.Fatalf("notification on %q", n.Channel)
			}
			if strings.HasPrefix(n.Payload, bucket+"/") {
				if n.Payload != bucket+"/"+key {
					t.Fatalf("write %d: payload %q, want %q", i, n.Payload, bucket+"/"+key)
				}
				break
			}
		}
		cancel()
	}
}
