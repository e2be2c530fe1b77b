-- Event notifications (docs/NOTIFICATIONS.md): targets the operator adds,
-- buckets' notification configurations (S3's PutBucketNotificationConfiguration),
-- and the per-target delivery queues they fill.

-- A delivery target. Its ARN (what a bucket's configuration names) is
-- arn:fencegate:sqs::NAME:KIND. The webhook's HMAC secret is sealed under the
-- server key like an access key's (meta/sealer.go), bound to 'target:' || name.
CREATE TABLE notify_targets (
    name          text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_-]{1,64}$'),
    kind          text NOT NULL CHECK (kind IN ('webhook', 'nats')),
    url           text NOT NULL,
    subject       text NOT NULL DEFAULT '',
    secret_sealed bytea,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A bucket's notification configuration, one row per QueueConfiguration or
-- TopicConfiguration, in document order. events holds S3's names
-- ('s3:ObjectCreated:*', 's3:ObjectRemoved:Delete', ...).
CREATE TABLE bucket_notifications (
    bucket   text NOT NULL,
    position integer NOT NULL,
    id       text NOT NULL,
    kind     text NOT NULL CHECK (kind IN ('queue', 'topic')),
    target   text NOT NULL REFERENCES notify_targets ON DELETE RESTRICT,
    events   text[] NOT NULL,
    prefix   text NOT NULL DEFAULT '',
    suffix   text NOT NULL DEFAULT '',
    PRIMARY KEY (bucket, position)
);

-- Each target's undelivered events. A row is written by the trigger below in
-- the transaction that commits the generation (so a configuration applies to
-- exactly the events committed after its own transaction), and deleted when
-- the target acknowledged it. The queue is the target's durable cursor: what
-- is in it is what has not been delivered.
CREATE TABLE notify_queue (
    id           bigserial PRIMARY KEY,
    target       text NOT NULL,
    outbox_id    bigint NOT NULL,
    event_name   text NOT NULL, -- 'ObjectCreated:Put', 'ObjectRemoved:Delete', ...
    bucket       text NOT NULL,
    key          text NOT NULL,
    generation   bigint NOT NULL,
    etag         text,
    size         bigint,
    attempt_id   uuid,
    committed_at timestamptz NOT NULL,
    tries        integer NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_error   text
);
-- Per key, the head (lowest id) is the only event that may be sent.
CREATE INDEX notify_queue_key ON notify_queue (target, bucket, key, id);
CREATE INDEX notify_queue_due ON notify_queue (target, next_at);

-- Events given up on after the configured number of tries;
-- `fencegate targets redrive NAME` moves them back into the queue.
CREATE TABLE notify_dead_letters (
    id           bigint PRIMARY KEY,
    target       text NOT NULL,
    outbox_id    bigint NOT NULL,
    event_name   text NOT NULL,
    bucket       text NOT NULL,
    key          text NOT NULL,
    generation   bigint NOT NULL,
    etag         text,
    size         bigint,
    attempt_id   uuid,
    committed_at timestamptz NOT NULL,
    tries        integer NOT NULL,
    last_error   text,
    dead_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX notify_dead_letters_target ON notify_dead_letters (target, id);

-- Which gateway delivers a target: a holder and an expiry on PostgreSQL's
-- clock, renewed while it delivers; another gateway takes the target over
-- once the claim expires.
CREATE TABLE notify_claims (
    target        text PRIMARY KEY,
    holder        uuid NOT NULL,
    claimed_until timestamptz NOT NULL
);

-- The fan-out: every outbox row of a bucket with a configuration becomes one
-- queue row per matching target, in the committing transaction. A bucket
-- without a configuration costs one index probe.
CREATE FUNCTION fencegate_notify_fanout() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_op   text;
    v_name text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM bucket_notifications WHERE bucket = NEW.bucket) THEN
        RETURN NULL;
    END IF;
    IF NEW.deleted THEN
        v_name := 'ObjectRemoved:Delete';
    ELSE
        SELECT op INTO v_op FROM attempts WHERE attempt_id = NEW.attempt_id;
        v_name := CASE v_op WHEN 'copy' THEN 'ObjectCreated:Copy'
                            WHEN 'complete' THEN 'ObjectCreated:CompleteMultipartUpload'
                            WHEN 'multipart' THEN 'ObjectCreated:CompleteMultipartUpload'
                            ELSE 'ObjectCreated:Put' END;
    END IF;
    INSERT INTO notify_queue (target, outbox_id, event_name, bucket, key, generation, etag, size, attempt_id, committed_at)
        SELECT DISTINCT n.target, NEW.id, v_name, NEW.bucket, NEW.key, NEW.generation, NEW.etag, NEW.size, NEW.attempt_id, NEW.committed_at
        FROM bucket_notifications n
        WHERE n.bucket = NEW.bucket
          AND left(NEW.key, length(n.prefix)) = n.prefix
          AND right(NEW.key, length(n.suffix)) = n.suffix
          AND ('s3:' || v_name = ANY (n.events) OR 's3:' || split_part(v_name, ':', 1) || ':*' = ANY (n.events));
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_notify_fanout AFTER INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION fencegate_notify_fanout();
