-- The write protocol (docs/DESIGN.md, W1-W10).

-- Generations come from one sequence: strictly increasing per key (they are
-- drawn under the key's lease row lock), never reused.
CREATE SEQUENCE generation_seq;

-- Buckets fencegate knows. complete: every key in it was written through
-- fencegate or imported, so a key the catalog lacks is absent at the store and
-- need not be HEADed before its first write.
CREATE TABLE buckets (
    bucket     text PRIMARY KEY,
    complete   boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One row per key ever leased. holder is the attempt holding the lease; a row
-- with holder NULL or expires_at in the past is free. Leases live on
-- PostgreSQL's clock (clock_timestamp()).
CREATE TABLE leases (
    bucket     text NOT NULL,
    key        text NOT NULL,
    holder     uuid,
    expires_at timestamptz,
    PRIMARY KEY (bucket, key)
);

-- Attempts: every write and every multipart upload. States:
--   leased     the holder is writing (its lease may have expired if it died)
--   open       a multipart upload between Create and Complete (no key lease)
--   committed  acknowledged by the store and committed by its writer
--   adopted    outcome was unknown; its bytes were found at the key and
--              adopted as a new, later generation
--   unknown    outcome unknown (network error, timeout, 5xx, lease lost,
--              COMMIT outcome unknown): a guard, kept until proven
--   failed     proven not written: the store refused it, its body never
--              completed, its fence was refused, or a later generation
--              superseded its fence
--   aborted    a multipart upload aborted by its client
CREATE TABLE attempts (
    attempt_id    uuid PRIMARY KEY,
    bucket        text NOT NULL,
    key           text NOT NULL,
    op            text NOT NULL CHECK (op IN ('put', 'copy', 'complete', 'delete', 'multipart')),
    state         text NOT NULL CHECK (state IN ('leased', 'open', 'committed', 'adopted', 'unknown', 'failed', 'aborted')),
    gateway       text NOT NULL,
    declared_size bigint,
    checksum      text,
    upload_id     text,
    generation    bigint,
    etag          text,
    reason        text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- reconciler bookkeeping: who claimed it, until when, how often tried
    claim_token   uuid,
    claimed_until timestamptz,
    tries         integer NOT NULL DEFAULT 0,
    last_error    text
);
CREATE INDEX attempts_unresolved ON attempts (bucket, key) WHERE state IN ('leased', 'unknown');
CREATE INDEX attempts_reconcile ON attempts (updated_at) WHERE state IN ('leased', 'unknown');
CREATE UNIQUE INDEX attempts_upload ON attempts (upload_id) WHERE upload_id IS NOT NULL;

-- Every committed generation, in order.
CREATE TABLE generations (
    bucket       text NOT NULL,
    key          text NOT NULL,
    generation   bigint NOT NULL,
    etag         text,
    size         bigint,
    attempt_id   uuid,
    deleted      boolean NOT NULL DEFAULT false,
    origin       text NOT NULL CHECK (origin IN ('fencegate', 'adopted', 'external')),
    committed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (bucket, key, generation)
);

-- The catalog: what each key resolves to now. deleted is a delete marker.
CREATE TABLE catalog (
    bucket       text NOT NULL,
    key          text NOT NULL,
    generation   bigint NOT NULL,
    etag         text,
    size         bigint,
    attempt_id   uuid,
    deleted      boolean NOT NULL DEFAULT false,
    origin       text NOT NULL CHECK (origin IN ('fencegate', 'adopted', 'external')),
    committed_at timestamptz NOT NULL,
    PRIMARY KEY (bucket, key)
);

-- One event per committed generation, written in the committing transaction.
-- See docs/OUTBOX.md for a consumer pattern that cannot skip events.
CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    bucket       text NOT NULL,
    key          text NOT NULL,
    generation   bigint NOT NULL,
    etag         text,
    size         bigint,
    deleted      boolean NOT NULL,
    origin       text NOT NULL,
    attempt_id   uuid,
    committed_at timestamptz NOT NULL
);
