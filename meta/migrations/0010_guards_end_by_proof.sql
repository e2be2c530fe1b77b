-- Guards end only by proof (docs/DESIGN.md, "When a guard ends").
--
-- fencegate_commit no longer marks a key's unknown attempts failed as
-- "superseded" when the holder's own write commits: no commit proves that an
-- unknown write can no longer land. A write fenced on absence
-- (If-None-Match: *) is excluded only while the key stays present, and every
-- delete reopens it; a write fenced on an ETag only while that ETag does not
-- come back (an identical re-upload, a copy onto itself); a client's own
-- condition (If-Match: *, If-None-Match: <etag>) may exclude nothing. An
-- unknown attempt stays a guard until its bytes are found (adopted) or it is
-- past its horizon (closed by lease/settle.go).
--
-- fencegate_acquire: an acquire repeated by the lease's own holder (its
-- earlier answer, or a commit's hand-over to it, was lost) returns the lease
-- it already holds instead of refusing it as held, which left the key
-- orphaned until its TTL ran out.

--
-- Fairness across gateways (lease/lease.go, YieldFor): a writer that will
-- wait marks the key's row whether or not its gateway listens for releases
-- (lease/lease.go), and the update that frees a row marked by a writer of
-- another gateway than the releasing holder's makes the holder's gateway
-- yield: for one second (yield_until) its writers cannot take the free key,
-- so a hot key that one gateway's writers hand each other reaches the other
-- gateways' waiters within one write and that second, listener or not.

-- attempts.unknown_at: when the attempt last became unknown (a trigger
-- stamps every move into that state, whoever makes it). A guard's horizon
-- counts from it, and it tells which generation the attempt was fenced on
-- (the key's last one committed before it), even after the attempt was
-- adopted or closed.
ALTER TABLE attempts ADD COLUMN unknown_at timestamptz;
UPDATE attempts SET unknown_at = updated_at WHERE state = 'unknown';

CREATE FUNCTION fencegate_attempt_unknown() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.unknown_at := clock_timestamp();
    RETURN NEW;
END $$;

CREATE TRIGGER attempts_unknown BEFORE UPDATE OF state ON attempts FOR EACH ROW
    WHEN (NEW.state = 'unknown' AND OLD.state IS DISTINCT FROM 'unknown')
    EXECUTE FUNCTION fencegate_attempt_unknown();

ALTER TABLE leases ADD COLUMN yield_from text, ADD COLUMN yield_until timestamptz;

CREATE OR REPLACE FUNCTION fencegate_lease_released() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_gateway text;
BEGIN
    SELECT gateway INTO v_gateway FROM attempts WHERE attempt_id = OLD.holder;
    IF OLD.wakeup = '*' OR v_gateway IS DISTINCT FROM OLD.wakeup THEN
        PERFORM pg_notify('fencegate_lease_released', fencegate_key_hash(OLD.bucket, OLD.key));
        IF v_gateway IS NOT NULL THEN
            NEW.yield_from := v_gateway;
            NEW.yield_until := clock_timestamp() + interval '1 second';
        END IF;
    END IF;
    NEW.wakeup := NULL;
    RETURN NEW;
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
    IF p_release THEN
        UPDATE leases SET holder = NULL, expires_at = NULL, session = NULL WHERE bucket = p_bucket AND key = p_key;
    END IF;
    RETURN v_gen;
END $$;

CREATE OR REPLACE FUNCTION fencegate_acquire(p_bucket text, p_key text, p_holder uuid, p_ttl interval, p_mode text,
        p_op text, p_gateway text, p_size bigint, p_checksum text, p_upload_attempt uuid, p_session uuid,
        p_wait boolean DEFAULT false,
        OUT acquired boolean, OUT dead_session_for double precision, OUT holder_live_for double precision)
    LANGUAGE plpgsql AS $$
DECLARE
    v_holder  uuid;
    v_expires timestamptz;
    v_session uuid;
    v_wakeup  text;
    v_mark    text;
    v_found   boolean := false; -- the key's row was there (locked)
    v_new     boolean := false; -- this call inserted it, leased to p_holder
    v_yield_from  text;
    v_yield_until timestamptz;
BEGIN
    acquired := false;
    FOR i IN 1..2 LOOP
        SELECT holder, expires_at, session, wakeup, yield_from, yield_until
            INTO v_holder, v_expires, v_session, v_wakeup, v_yield_from, v_yield_until
            FROM leases WHERE bucket = p_bucket AND key = p_key FOR UPDATE;
        v_found := FOUND;
        EXIT WHEN v_found;
        INSERT INTO leases (bucket, key, holder, expires_at, session)
            VALUES (p_bucket, p_key, p_holder, clock_timestamp() + p_ttl, p_session) ON CONFLICT DO NOTHING;
        v_new := FOUND;
        EXIT WHEN v_new;
        -- Another writer inserted it first (the insert waited for its
        -- commit): read its row like any other, so a waiter marks it.
    END LOOP;
    IF v_new THEN
        NULL;
    ELSIF NOT v_found THEN
        RETURN; -- inserted by another writer and pruned again, twice: busy
    ELSIF v_holder = p_holder AND fencegate_lease_live(v_holder, v_expires, v_session) THEN
        -- The caller holds it already: an earlier call (or a hand-over) took
        -- it and its answer was lost. It keeps the lease it has.
        UPDATE leases SET expires_at = clock_timestamp() + p_ttl WHERE bucket = p_bucket AND key = p_key;
    ELSIF fencegate_lease_live(v_holder, v_expires, v_session)
            OR (v_yield_from = p_gateway AND v_yield_until > clock_timestamp()) THEN
        -- Held by a live writer, or free while this gateway yields it to
        -- the others (its last holder's gateway, see above).
        holder_live_for := extract(epoch FROM coalesce(least(v_expires,
            (SELECT s.expires_at FROM sessions s WHERE s.session_id = v_session)), v_yield_until) - clock_timestamp());
        IF p_wait THEN
            v_mark := CASE WHEN v_wakeup IS NULL OR v_wakeup = p_gateway THEN p_gateway ELSE '*' END;
            IF v_mark IS DISTINCT FROM v_wakeup THEN
                UPDATE leases SET wakeup = v_mark WHERE bucket = p_bucket AND key = p_key;
            END IF;
        END IF;
        RETURN;
    ELSE
        IF v_holder IS NOT NULL AND v_session IS NOT NULL THEN
            SELECT extract(epoch FROM clock_timestamp() - coalesce(s.ended_at, s.heartbeat_at)) INTO dead_session_for
                FROM sessions s WHERE s.session_id = v_session
                  AND (s.ended_at IS NOT NULL OR s.expires_at <= clock_timestamp());
        END IF;
        UPDATE leases SET holder = p_holder, expires_at = clock_timestamp() + p_ttl, progress_at = NULL, session = p_session,
                yield_from = NULL, yield_until = NULL
            WHERE bucket = p_bucket AND key = p_key;
        IF v_holder IS NOT NULL THEN
            -- the previous holder lost its lease: it may have landed
            UPDATE attempts SET state = 'unknown', reason = 'lease expired', updated_at = clock_timestamp()
                WHERE attempt_id = v_holder AND state = 'leased';
        END IF;
    END IF;
    IF p_mode = 'new' THEN
        INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, declared_size, checksum, upload_attempt)
            VALUES (p_holder, p_bucket, p_key, p_op, 'leased', p_gateway, p_size, nullif(p_checksum, ''), p_upload_attempt)
            ON CONFLICT (attempt_id) DO NOTHING;
        -- The id may be this holder's own attempt, recorded by the call whose
        -- answer was lost; an id of another key's attempt is refused.
        IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM attempts
                WHERE attempt_id = p_holder AND bucket = p_bucket AND key = p_key) THEN
            RAISE EXCEPTION 'attempt % belongs to another key', p_holder USING ERRCODE = 'unique_violation';
        END IF;
    END IF;
    acquired := true;
END $$;
