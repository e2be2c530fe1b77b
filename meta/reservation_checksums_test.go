package meta

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/stack"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestReservationChecksumsMigration: reservations made before migration 0015
// (by 0012's fencegate_reserve, with a SHA-256 or none) stay valid and read
// as they were; after it a reservation names at most one of SHA-256, CRC32C
// and CRC64NVME (the table refuses two), and its committed event records
// the checksum its bytes were verified against.
func TestReservationChecksumsMigration(t *testing.T) {
	admin := testenv.DatabaseURL(t)
	ctx := context.Background()
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	at := -1
	for i, m := range ms {
		if strings.HasPrefix(m.Name, "0015_") {
			at = i
		}
	}
	if at < 0 {
		t.Fatal("no migration 0015")
	}
	url, err := stack.CreateDatabase(ctx, admin, "reservation_checksums_migration")
	if err != nil {
		t.Fatal(err)
	}
	legacyMigrate(t, url, ms[:at])
	pool, err := Open(ctx, url, PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const sha = "LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="
	old := map[string]*string{"00000000-0000-4000-8000-000000000001": ptr(sha), "00000000-0000-4000-8000-000000000002": nil}
	for id, sum := range old {
		if _, err := pool.Exec(ctx, `SELECT * FROM fencegate_reserve($1::uuid, 'b', $1::text, 'K', NULL, 5, NULL, $2, '', NULL, NULL, 'h', '1 hour'::interval)`,
			id, sum); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s := &Reservations{Pool: pool}
	for id, sum := range old {
		r, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if sum != nil {
			want = *sum
		}
		if r.SHA256 != want || r.CRC32C != "" || r.CRC64NVME != "" || r.State != ReservationReserved {
			t.Fatalf("%s after the migration: %+v", id, r)
		}
	}

	c, err := s.Create(ctx, ReservationRequest{Bucket: "b", Key: "crc", AccessKeyID: "K", CRC32C: "mnG7TA==", TTL: time.Minute})
	if err != nil || c.CRC32C != "mnG7TA==" || c.SHA256 != "" {
		t.Fatalf("create with a CRC32C: %v %+v", err, c)
	}
	if alg, v := c.Checksum(); alg != "crc32c" || v != "mnG7TA==" {
		t.Fatalf("Checksum() = %s %s", alg, v)
	}
	if _, err := s.Create(ctx, ReservationRequest{Bucket: "b", Key: "two", AccessKeyID: "K", CRC32C: "mnG7TA==",
		CRC64NVME: "M3eFcAZSQlc=", TTL: time.Minute}); err == nil || !strings.Contains(err.Error(), "reservations_one_checksum") {
		t.Fatalf("two checksums: %v, want the table's refusal", err)
	}
	for id, want := range map[string]string{c.ID: "crc32c:mnG7TA==", "00000000-0000-4000-8000-000000000001": "sha256:" + sha,
		"00000000-0000-4000-8000-000000000002": ""} {
		if _, err := pool.Exec(ctx, `SELECT fencegate_reservation_commit($1, 5, 'etag', 1)`, id); err != nil {
			t.Fatal(err)
		}
		var got, created *string
		if err := pool.QueryRow(ctx, `SELECT max(checksum) FILTER (WHERE event = 'reservation.committed'),
			max(checksum) FILTER (WHERE event = 'reservation.created') FROM reservation_events WHERE reservation_id = $1`, id).Scan(&got, &created); err != nil {
			t.Fatal(err)
		}
		if (got == nil) != (want == "") || got != nil && *got != want || created != nil {
			t.Fatalf("%s: committed event's checksum %v, created's %v; want %q and none", id, got, created, want)
		}
	}
}

// TestValidateReservationChecksums: each checksum is its algorithm's
// length in base64, and a reservation names at most one.
func TestValidateReservationChecksums(t *testing.T) {
	base := ReservationRequest{Bucket: "b", Key: "k", AccessKeyID: "K", TTL: time.Minute}
	for _, tc := range []struct {
		name string
		set  func(*ReservationRequest)
		ok   bool
	}{
		{"crc32c", func(q *ReservationRequest) { q.CRC32C = "mnG7TA==" }, true},
		{"crc64nvme", func(q *ReservationRequest) { q.CRC64NVME = "M3eFcAZSQlc=" }, true},
		{"sha256", func(q *ReservationRequest) { q.SHA256 = "LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=" }, true},
		{"crc32c of 8 bytes", func(q *ReservationRequest) { q.CRC32C = "M3eFcAZSQlc=" }, false},
		{"crc64nvme of 4 bytes", func(q *ReservationRequest) { q.CRC64NVME = "mnG7TA==" }, false},
		{"crc32c unpadded", func(q *ReservationRequest) { q.CRC32C = "mnG7TA" }, false},
		{"two", func(q *ReservationRequest) { q.CRC32C, q.CRC64NVME = "mnG7TA==", "M3eFcAZSQlc=" }, false},
		{"sha256 and crc32c", func(q *ReservationRequest) {
			q.SHA256, q.CRC32C = "LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=", "mnG7TA=="
		}, false},
	} {
		q := base
		tc.set(&q)
		if err := ValidateReservation(q); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
