-- fencegate_commit no longer NOTIFYs: a NOTIFY makes PostgreSQL serialize the
-- commits of all notifying transactions, WAL flush included, under one
-- database-wide lock (no group commit). The gateway sends the wake-up after the
-- commit, on its own (meta/notify.go); the outbox row stays in this transaction.

-- fencegate_commit records a generation under p_holder's lease and returns it,
-- or NULL (nothing written) when the lease is no longer held.
CREATE OR REPLACE FUNCTION fencegate_commit(p_bucket text, p_key text, p_holder uuid, p_settled uuid, p_settled_state text,
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
