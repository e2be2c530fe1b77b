package lease

// The protocol's vocabulary: what a lease request, an attempt, a key's
// catalog entry and the lifecycle service's items are. lease defines them and
// its Driver and LifecycleDriver speak them; meta (the SQL) implements those
// interfaces in these terms, so nothing above lease depends on meta.

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// ErrLeaseLost: the caller's lease expired or was taken over; nothing was
// committed.
var ErrLeaseLost = errors.New("lease lost")

// NewID is a random UUID (version 4), the form of attempt ids.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Attempt is one write or multipart upload.
type Attempt struct {
	ID           string
	Bucket, Key  string
	Op           Kind
	State        string
	Gateway      string
	DeclaredSize int64 // -1: not known
	Checksum     string
	UploadID     string
	// UploadAttempt is a Complete try's multipart upload (its attempt id).
	UploadAttempt string
	// Reservation is the upload reservation the attempt writes under ("":
	// none; docs/RESERVATIONS.md): a new attempt's acquire binds it in its
	// own transaction, when the reservation is still live.
	Reservation string
	Generation  int64
	ETag        string
	// InState is how long the attempt has been in its state (an unknown
	// one: since it last became unknown), on PostgreSQL's clock when it was
	// read.
	InState time.Duration
}

// Entry is a key's catalog row: what it resolves to now.
type Entry struct {
	Generation  int64
	ETag        string
	Size        int64
	AttemptID   string
	Deleted     bool
	Origin      string
	CommittedAt time.Time
}

// KeyState is what a writer needs to settle a key before writing it.
type KeyState struct {
	Entry          *Entry    // nil: the catalog has never seen the key
	Unresolved     []Attempt // unknown attempts, and leased ones whose holder lost the lease
	BucketComplete bool
}

// AcquireParams describes a lease request and the attempt it records.
type AcquireParams struct {
	Bucket, Key string
	Attempt     Attempt // ID set: a new attempt, recorded as leased
	// NoAttempt: the holder is a settler (the reconciler), not a write.
	NoAttempt bool
	TTL       time.Duration
	// Session is the holder's gateway session ("": none, the lease lives on
	// its own expiry alone).
	Session string
	// Wait: the writer waits if the key is held, so a refused acquire marks
	// the key's lease row with Attempt.Gateway and the row's release
	// notifies that gateway's listener (ListenReleases) unless the holder
	// is of the same gateway (meta/migrations/0008_release_wakeups.sql).
	Wait bool
}

// Held is Acquire's error while another holder is live: nothing was taken
// (only a waiter's mark written, see AcquireParams.Wait).
type Held struct {
	// LiveFor is how long the holder stays live at most, on the database
	// clock, unless it renews its lease or its session heartbeats: the
	// earlier of its lease's and its session's expiry.
	LiveFor time.Duration
}

func (h *Held) Error() string {
	return fmt.Sprintf("the key is held by a live writer (live for at most %s more)", h.LiveFor)
}

// Acquired is a lease taken: the key's state read under it and, when it was
// taken from a holder whose session was dead, how long that session had been
// silent (since its last heartbeat or its end) on the database clock.
type Acquired struct {
	State               *KeyState
	TookOverDeadSession bool
	DeadSessionFor      time.Duration
	// ReservationBound: Attempt.Reservation was bound to the attempt in the
	// acquire's transaction. ReservationEnded: it is no longer live (ended,
	// past its expiry, or another key's), so nothing may be sent under it.
	// Neither: the attempt has no reservation, or the lease was handed over
	// by a commit, which binds nothing: the writer binds it itself.
	ReservationBound, ReservationEnded bool
}

// Ending is how a lease holder's attempt ended, recorded when it releases.
type Ending struct {
	State, Reason string
	// Fence is the condition the try was sent with ('*', an ETag, or '' for
	// none of fencegate's); nil: nothing was sent, or not known.
	Fence *string
	// Checksum is the body's checksum as sent ("crc32:<base64>"), "" if none.
	Checksum string
}

// CommitParams records a generation under the caller's lease.
type CommitParams struct {
	Bucket, Key string
	Holder      string // the lease holder (an attempt id)
	// Settled is the attempt this generation settles and the state it moves to:
	// the holder itself (committed) or an unknown attempt found at the key
	// (adopted). Empty for an external generation.
	Settled      string
	SettledState string
	Entry        Entry // ETag, Size, AttemptID (on the bytes), Deleted, Origin
	// Release frees the lease in the same transaction (a writer's own commit).
	Release bool
}

// Attempt states (see meta/migrations/0002_write_protocol.sql for their meaning).
const (
	StateLeased    = "leased"
	StateOpen      = "open"
	StateCommitted = "committed"
	StateAdopted   = "adopted"
	StateUnknown   = "unknown"
	StateFailed    = "failed"
	StateAborted   = "aborted"
)

// Generation origins.
const (
	OriginFencegate = "fencegate"
	OriginAdopted   = "adopted"
	OriginExternal  = "external"
)

// Backlog is what waits for the reconciler, and the ages operators watch.
type Backlog struct {
	Unresolved       int // unknown attempts and leased ones whose holder is gone
	AbandonedUploads int // open uploads fencegate created, idle past the abandoned age
	AuditBuckets     int // buckets with an audit cursor
	// UnboundUploads: multipart attempts whose Create left no upload id
	// (unknown, or open without one) past the settle delay, for the uploads
	// kind to bind to the store's upload or mark failed.
	UnboundUploads int
	// OldestUnknown is the age of the oldest unknown guard (0: none);
	// OldestAbandoned that of the oldest abandoned upload, since it became
	// abandoned (0: none).
	OldestUnknown, OldestAbandoned time.Duration
}

// AbandonedUpload is a multipart upload fencegate created, claimed for clean-up.
type AbandonedUpload struct {
	AttemptID, Bucket, Key, UploadID string
	CreatedAt                        time.Time
	Tries                            int
}

// UploadWithoutID is a multipart attempt whose CreateMultipartUpload left no
// upload id in the catalog: its outcome unknown (state unknown: no answer, a
// 5xx), or its answer came and recording the id failed (state open without
// an upload id; a Create still in flight looks the same).
type UploadWithoutID struct {
	AttemptID, Bucket, Key, State string
	// CreatedAt to WindowEnd (PostgreSQL's clock) is when the store can have
	// created its upload: the attempt's row is written before the request is
	// sent, and an unknown outcome recorded after the request ended; an open
	// attempt's window runs to now.
	CreatedAt, WindowEnd time.Time
	Age                  time.Duration // since CreatedAt, on PostgreSQL's clock
	Tries                int
}

// Cursor is a bucket's incremental audit position, claimed.
type Cursor struct {
	Bucket, Marker, AfterKey string
	UploadKey, UploadID      string
	Rounds, Tries            int
}

// Retention says how long settled rows are kept; zero keeps them forever.
type Retention struct {
	Attempts, Outbox, Leases time.Duration
}

// Pruned counts one pruning batch.
type Pruned struct{ Attempts, Outbox, Leases, Reservations int }

// Pass is one work kind's pass, as fencegate status reports it.
type Pass struct {
	Kind, Gateway                                         string
	StartedAt                                             time.Time
	Duration                                              time.Duration
	Batches, Claimed, Completed, Retried, Skipped, Failed int
}

// KeyHash is a key's release notification payload: the first 16 hex digits
// of the SHA-256 of bucket/key (fencegate_key_hash in SQL). Bucket names
// contain no '/', so distinct keys have distinct inputs; 64 bits make a
// collision (a waiter woken for nothing, which then asks once and waits on)
// negligible.
func KeyHash(bucket, key string) string {
	sum := sha256.Sum256([]byte(bucket + "/" + key))
	return hex.EncodeToString(sum[:8])
}

// ErrNotFound: a Driver lookup (an attempt by id or by upload) found nothing.
var ErrNotFound = errors.New("not found")
