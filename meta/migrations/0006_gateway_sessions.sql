-- Gateway sessions (docs/DESIGN.md, "Gateway sessions"). Every gateway process
-- keeps one session row alive with a short heartbeat on PostgreSQL's clock;
-- every key lease names its holder's session. A lease is live only while its
-- own expiry is ahead AND its session is alive, so a crashed or partitioned
-- gateway's keys are free once its session expires (10 s by default), not
-- after the key lease's TTL (60 s). Fencing makes the shorter effective lease
-- safe: a paused holder that resumes late is refused by the store's condition
-- and by the commit, which checks the same rule.
CREATE TABLE sessions (
    session_id   uuid PRIMARY KEY,
    gateway      text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at   timestamptz NOT NULL,
    ended_at     timestamptz
);
CREATE INDEX sessions_open ON sessions (expires_at) WHERE ended_at IS NULL;

-- session: the holder's session; NULL for a holder without one (a tool such
-- as `fencegate catalog import`, or a lease taken before this migration),
-- whose lease is live on its own expiry alone.
ALTER TABLE leases ADD COLUMN session uuid;
CREATE INDEX leases_session ON leases (session) WHERE session IS NOT NULL;

-- The one liveness rule. Every statement that decides whether a key's holder
-- is alive (acquire's takeover, commit's held-check, renewal, progress, the
-- waiters' progress check, the unresolved attempts) calls this.
-- PL/pgSQL, not SQL: a SQL function called from another function's
-- statements is planned again at every call, and this one runs several times
-- per write; PL/pgSQL keeps its plan.
CREATE FUNCTION fencegate_lease_live(p_holder uuid, p_expires timestamptz, p_session uuid)
    RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_holder IS NULL OR NOT coalesce(p_expires > clock_timestamp(), false) THEN
        RETURN false;
    END IF;
    IF p_session IS NULL THEN
        RETURN true;
    END IF;
    RETURN EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = p_session
        AND s.ended_at IS NULL AND s.expires_at > clock_timestamp());
END $$;

DROP FUNCTION fencegate_acquire(text, text, uuid, interval, text, text, text, bigint, text, uuid);

-- fencegate_acquire takes (bucket, key)'s lease for p_holder of session
-- p_session if it is free or its holder is no longer live, and records the
-- attempt; acquired false (nothing written) while another holder is live.
-- p_mode: 'new' inserts the attempt (p_upload_attempt names a Complete try's
-- upload), 'settle' records none. dead_session_for is set when the lease was
-- taken from a holder whose session is dead: seconds since that session last
-- proved alive (its last heartbeat, or its end), on the database clock.
CREATE FUNCTION fencegate_acquire(p_bucket text, p_key text, p_holder uuid, p_ttl interval, p_mode text,
        p_op text, p_gateway text, p_size bigint, p_checksum text, p_upload_attempt uuid, p_session uuid,
        OUT acquired boolean, OUT dead_session_for double precision)
    LANGUAGE plpgsql AS $$
DECLARE
    v_holder  uuid;
    v_expires timestamptz;
    v_session uuid;
BEGIN
    acquired := false;
    SELECT holder, expires_at, session INTO v_holder, v_expires, v_session
        FROM leases WHERE bucket = p_bucket AND key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO leases (bucket, key, holder, expires_at, session)
            VALUES (p_bucket, p_key, p_holder, clock_timestamp() + p_ttl, p_session) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN; -- another writer inserted it first
        END IF;
    ELSIF fencegate_lease_live(v_holder, v_expires, v_session) THEN
        RETURN;
    ELSE
        IF v_holder IS NOT NULL AND v_session IS NOT NULL THEN
            SELECT extract(epoch FROM clock_timestamp() - coalesce(s.ended_at, s.heartbeat_at)) INTO dead_session_for
                FROM sessions s WHERE s.session_id = v_session
                  AND (s.ended_at IS NOT NULL OR s.expires_at <= clock_timestamp());
        END IF;
        UPDATE leases SET holder = p_holder, expires_at = clock_timestamp() + p_ttl, progress_at = NULL, session = p_session
            WHERE bucket = p_bucket AND key = p_key;
        IF v_holder IS NOT NULL THEN
            -- the previous holder lost its lease: it may have landed
            UPDATE attempts SET state = 'unknown', reason = 'lease expired', updated_at = clock_timestamp()
                WHERE attempt_id = v_holder AND state = 'leased';
        END IF;
    END IF;
    IF p_mode = 'new' THEN
        INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, declared_size, checksum, upload_attempt)
            VALUES (p_holder, p_bucket, p_key, p_op, 'leased', p_gateway, p_size, nullif(p_checksum, ''), p_upload_attempt);
    END IF;
    acquired := true;
END $$;

-- fencegate_commit records a generation under p_holder's lease and returns it,
-- or NULL (nothing written) when the lease is no longer held: taken over,
-- expired, or its session dead.
CREATE OR REPLACE FUNCTION fencegate_commit(p_bucket text, p_key text, p_holder uuid, p_settled uuid, p_settled_state text,
        p_etag text, p_size bigint, p_attempt uuid, p_deleted boolean, p_origin text, p_release boolean)
    RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_held   boolean;
    v_gen    bigint;
    v_at     timestamptz;
    v_upload uuid;
BEGIN
    PERFORM 1 FROM leases WHERE bucket = p_bucket AND key = p_key FOR UPDATE;
    -- A later statement, so clock_timestamp() is read after the lock is granted:
    -- waiting for the lock never authorizes an expired writer.
    SELECT holder = p_holder AND fencegate_lease_live(holder, expires_at, session) INTO v_held
        FROM leases WHERE bucket = p_bucket AND key = p_key;
    IF NOT coalesce(v_held, false) THEN
        RETURN NULL;
    END IF;
    v_gen := nextval('generation_seq');
    v_at := clock_timestamp();
    INSERT INTO generations (bucket, key, generation, etag, size, attempt_id, deleted, origin, committed_at)
        VALUES (p_bucket, p_key, v_gen, nullif(p_etag, ''), p_size, p_attempt, p_deleted, p_origin, v_at);
    INSERT INTO catalog (bucket, key, generation, etag, size, attempt_id, deleted, origin, committed_at)
        VALUES (p_bucket, p_key, v_gen, nullif(p_etag, ''), p_size, p_attempt, p_deleted, p_origin, v_at)
        ON CONFLICT (bucket, key) DO UPDATE SET generation = EXCLUDED.generation, etag = EXCLUDED.etag, size = EXCLUDED.size,
            attempt_id = EXCLUDED.attempt_id, deleted = EXCLUDED.deleted, origin = EXCLUDED.origin, committed_at = EXCLUDED.committed_at;
    INSERT INTO outbox (bucket, key, generation, etag, size, deleted, origin, attempt_id, committed_at)
        VALUES (p_bucket, p_key, v_gen, nullif(p_etag, ''), p_size, p_deleted, p_origin, p_attempt, v_at);
    IF p_settled IS NOT NULL THEN
        UPDATE attempts SET state = p_settled_state, generation = v_gen, etag = nullif(p_etag, ''), reason = NULL,
            updated_at = clock_timestamp(), claim_token = NULL, claimed_until = NULL
            WHERE attempt_id = p_settled
            RETURNING upload_attempt INTO v_upload;
        IF v_upload IS NOT NULL THEN
            -- A Complete try published its upload: the upload's row says so (a
            -- repeated Complete is answered from it), and its other tries can
            -- publish nothing more (an upload completes once).
            UPDATE attempts SET state = p_settled_state, generation = v_gen, etag = nullif(p_etag, ''),
                updated_at = clock_timestamp() WHERE attempt_id = v_upload;
            UPDATE attempts SET state = 'failed', updated_at = clock_timestamp(),
                reason = 'its upload was published by generation ' || v_gen || ' (another try)'
                WHERE upload_attempt = v_upload AND attempt_id <> p_settled AND state IN ('leased', 'unknown')
                  AND attempt_id <> p_holder;
        END IF;
    END IF;
    IF p_settled = p_holder AND p_settled_state = 'committed' THEN
        -- The holder's own fenced write landed: unknown tries it excluded can no
        -- longer land (see the ETag limit in docs/DESIGN.md). A delete excludes
        -- only tries fenced on an ETag: it makes If-None-Match: * true again,
        -- and a try whose fence is not known may carry that.
        UPDATE attempts SET state = 'failed', updated_at = clock_timestamp(),
            reason = 'superseded by generation ' || v_gen || ', whose fenced write excluded it'
            WHERE bucket = p_bucket AND key = p_key AND state = 'unknown' AND op <> 'multipart'
              AND (NOT p_deleted OR (fence IS NOT NULL AND fence NOT IN ('', '*')));
    END IF;
    IF p_release THEN
        UPDATE leases SET holder = NULL, expires_at = NULL, session = NULL WHERE bucket = p_bucket AND key = p_key;
    END IF;
    RETURN v_gen;
END $$;
