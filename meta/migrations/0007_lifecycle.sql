-- The reconciler's lifecycle service (docs/DESIGN.md, "The reconciler"):
-- abandoned multipart uploads, the incremental bucket audit, pruning, and what
-- `fencegate status` reports. (0006 is the gateway sessions' migration.)

-- activity_at: a multipart upload's last activity as the store reported it
-- (its newest part's LastModified, read with ListParts). An open upload whose
-- creation and last activity are both older than the abandoned age is aborted.
ALTER TABLE attempts ADD COLUMN activity_at timestamptz;
CREATE INDEX attempts_open_uploads ON attempts (updated_at) WHERE op = 'multipart' AND state = 'open';
CREATE INDEX attempts_settled ON attempts (updated_at) WHERE state IN ('committed', 'adopted', 'failed', 'aborted');
-- Pruning a key's lease row asks whether the key has any attempt with live
-- work or recent activity: without this, one scan of attempts per lease row.
CREATE INDEX attempts_key ON attempts (bucket, key, updated_at);

-- One cursor per bucket for the incremental audit: where the next page of
-- ListObjectsV2 (marker, and the last key already compared) and of
-- ListMultipartUploads starts. Claimed like attempts (claim_token,
-- claimed_until, FOR UPDATE SKIP LOCKED), so gateways audit different buckets.
CREATE TABLE audit_cursors (
    bucket          text PRIMARY KEY,
    marker          text NOT NULL DEFAULT '',
    after_key       text NOT NULL DEFAULT '',
    upload_key      text NOT NULL DEFAULT '',
    upload_id       text NOT NULL DEFAULT '',
    rounds          integer NOT NULL DEFAULT 0, -- full passes over the bucket
    claim_token     uuid,
    claimed_until   timestamptz,
    tries           integer NOT NULL DEFAULT 0,
    last_error      text,
    passed_at       timestamptz
);

-- Multipart uploads found at the store that fencegate did not create
-- (ListMultipartUploads). The policy decides: report only (default) or abort
-- after an age.
CREATE TABLE foreign_uploads (
    bucket      text NOT NULL,
    key         text NOT NULL,
    upload_id   text PRIMARY KEY,
    initiated   timestamptz,
    first_seen  timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen   timestamptz NOT NULL DEFAULT clock_timestamp(),
    aborted_at  timestamptz
);

-- The last pass of each work kind, per gateway (fencegate status).
CREATE TABLE reconciler_passes (
    kind        text NOT NULL,
    gateway     text NOT NULL,
    started_at  timestamptz NOT NULL,
    duration_ms bigint NOT NULL,
    batches     integer NOT NULL,
    claimed     integer NOT NULL,
    completed   integer NOT NULL,
    retried     integer NOT NULL,
    skipped     integer NOT NULL,
    failed      integer NOT NULL,
    PRIMARY KEY (kind, gateway)
);

-- Outbox consumers acknowledge here (docs/OUTBOX.md): acked_id says every
-- outbox row with id <= acked_id is processed by this consumer and no row with
-- such an id can still become visible (a pg_snapshot_xmin-bounded cursor). The
-- reconciler prunes outbox rows only below every consumer's acked_id, and only
-- after the outbox retention; with no consumer registered it prunes none.
CREATE TABLE outbox_consumers (
    consumer  text PRIMARY KEY,
    acked_id  bigint NOT NULL DEFAULT 0,
    acked_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
