-- The write protocol's two transactions as functions, so each costs one round
-- trip instead of one per statement. Their statements keep the order the
-- protocol needs (docs/DESIGN.md, W5): the commit locks the lease row first and
-- checks the lease on clock_timestamp() in a later statement.

-- fencegate_acquire takes (bucket, key)'s lease for p_holder if it is free or
-- expired and records the attempt; false (nothing written) while another
-- holder's lease is live. p_mode: 'new' inserts the attempt, 'existing'
-- re-leases a multipart upload's attempt, 'settle' records none.
CREATE FUNCTION fencegate_acquire(p_bucket text, p_key text, p_holder uuid, p_ttl interval, p_mode text,
        p_op text, p_gateway text, p_size bigint, p_checksum text, p_upload text)
    RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_holder uuid;
    v_live   boolean;
BEGIN
    SELECT holder, coalesce(expires_at > clock_timestamp(), false) INTO v_holder, v_live
        FROM leases WHERE bucket = p_bucket AND key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO leases (bucket, key, holder, expires_at)
            VALUES (p_bucket, p_key, p_holder, clock_timestamp() + p_ttl) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN false; -- another writer inserted it first
        END IF;
    ELSIF v_holder IS NOT NULL AND v_live THEN
        RETURN false;
    ELSE
        UPDATE leases SET holder = p_holder, expires_at = clock_timestamp() + p_ttl
            WHERE bucket = p_bucket AND key = p_key;
        IF v_holder IS NOT NULL THEN
            -- the previous holder lost its lease: it may have landed
            UPDATE attempts SET state = 'unknown', reason = 'lease expired', updated_at = clock_timestamp()
                WHERE attempt_id = v_holder AND state = 'leased';
        END IF;
    END IF;
    IF p_mode = 'existing' THEN
        -- a settled attempt stays settled: a retry of its Complete finds it so
        UPDATE attempts SET state = 'leased', gateway = p_gateway, updated_at = clock_timestamp()
            WHERE attempt_id = p_holder AND state NOT IN ('committed', 'adopted', 'aborted');
    ELSIF p_mode = 'new' THEN
        INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, declared_size, checksum, upload_id)
            VALUES (p_holder, p_bucket, p_key, p_op, 'leased', p_gateway, p_size, nullif(p_checksum, ''), nullif(p_upload, ''));
    END IF;
    RETURN true;
END $$;

-- fencegate_commit records a generation under p_holder's lease and returns it,
-- or NULL (nothing written) when the lease is no longer held.
CREATE FUNCTION fencegate_commit(p_bucket text, p_key text, p_holder uuid, p_settled uuid, p_settled_state text,
        p_etag text, p_size bigint, p_attempt uuid, p_deleted boolean, p_origin text, p_release boolean)
    RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_held boolean;
    v_gen  bigint;
    v_at   timestamptz;
BEGIN
    PERFORM 1 FROM leases WHERE bucket = p_bucket AND key = p_key FOR UPDATE;
    -- A later statement, so clock_timestamp() is read after the lock is granted:
    -- waiting for the lock never authorizes an expired writer.
    SELECT coalesce(holder = p_holder AND expires_at > clock_timestamp(), false) INTO v_held
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
    PERFORM pg_notify('fencegate_outbox', p_bucket || '/' || p_key);
    IF p_settled IS NOT NULL THEN
        UPDATE attempts SET state = p_settled_state, generation = v_gen, etag = nullif(p_etag, ''), reason = NULL,
            updated_at = clock_timestamp(), claim_token = NULL, claimed_until = NULL
            WHERE attempt_id = p_settled;
    END IF;
    IF p_settled = p_holder AND p_settled_state = 'committed' THEN
        -- the holder's own fenced write landed: unknown attempts it excluded
        -- can no longer land (see the ETag limit in README.md)
        UPDATE attempts SET state = 'failed', updated_at = clock_timestamp(),
            reason = 'superseded by generation ' || v_gen || ', whose fenced write excluded it'
            WHERE bucket = p_bucket AND key = p_key AND state = 'unknown';
    END IF;
    IF p_release THEN
        UPDATE leases SET holder = NULL, expires_at = NULL WHERE bucket = p_bucket AND key = p_key;
    END IF;
    RETURN v_gen;
END $$;
