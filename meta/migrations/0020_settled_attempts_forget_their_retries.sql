-- A commit that settles an attempt (its writer's own, or a guard the settle
-- or the reconciler adopts) clears the attempt's retry state with its claim:
-- claim_session (0019) and last_error, the reason the last try to settle
-- it failed (RetryKeyLater). Before, an adopted guard kept showing the
-- store error of a try that came before its adoption (fencegate console,
-- the attempts of a key), as if settling it were still failing.

CREATE OR REPLACE FUNCTION fencegate_commit(p_bucket text, p_key text, p_holder uuid, p_settled uuid, p_settled_state text, p_etag text, p_size bigint, p_attempt uuid, p_deleted boolean, p_origin text, p_release boolean) RETURNS bigint
    LANGUAGE plpgsql AS $$
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
            updated_at = clock_timestamp(), claim_token = NULL, claimed_until = NULL, claim_session = NULL,
            last_error = NULL
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

