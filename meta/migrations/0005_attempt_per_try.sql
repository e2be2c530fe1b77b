-- Every try of a write is an attempt of its own (docs/DESIGN.md, W6: a guard
-- leaves only by proof). A CompleteMultipartUpload try used to re-lease the
-- upload's attempt: a retry flipped the earlier try's unknown guard back to
-- leased, its failure overwrote the guard, and a stale try's late release could
-- free a newer holder's lease. Now each try is a new attempt that names its
-- upload in upload_attempt; the upload's own row records whether some try
-- published it.
ALTER TABLE attempts ADD COLUMN upload_attempt uuid;
CREATE INDEX attempts_upload_attempt ON attempts (upload_attempt) WHERE upload_attempt IS NOT NULL;

-- fence: the condition the try was sent to the store with, recorded when it
-- ends: '*' (If-None-Match: *), an ETag (If-Match), '' (none of fencegate's: the
-- client's own condition, or a versioned delete); NULL when its holder died
-- before saying. A committed DELETE makes If-None-Match: * true again, so it
-- retires only guards fenced on an ETag.
ALTER TABLE attempts ADD COLUMN fence text;

-- progress_at: when the holder last saw its write's bytes flowing. A writer
-- that finds the key leased keeps waiting past its base wait while the
-- holder's progress is recent, up to its maximum wait.
ALTER TABLE leases ADD COLUMN progress_at timestamptz;

DROP FUNCTION fencegate_acquire(text, text, uuid, interval, text, text, text, bigint, text, text);

-- fencegate_acquire takes (bucket, key)'s lease for p_holder if it is free or
-- expired and records the attempt; false (nothing written) while another
-- holder's lease is live. p_mode: 'new' inserts the attempt (p_upload_attempt
-- names a Complete try's upload), 'settle' records none.
CREATE FUNCTION fencegate_acquire(p_bucket text, p_key text, p_holder uuid, p_ttl interval, p_mode text,
        p_op text, p_gateway text, p_size bigint, p_checksum text, p_upload_attempt uuid)
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
        UPDATE leases SET holder = p_holder, expires_at = clock_timestamp() + p_ttl, progress_at = NULL
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
    RETURN true;
END $$;

-- fencegate_commit records a generation under p_holder's lease and returns it,
-- or NULL (nothing written) when the lease is no longer held.
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
        UPDATE leases SET holder = NULL, expires_at = NULL WHERE bucket = p_bucket AND key = p_key;
    END IF;
    RETURN v_gen;
END $$;
