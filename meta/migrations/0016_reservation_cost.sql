-- The reservation's statements made cheaper for PostgreSQL (issue 31's cost;
-- docs/COST.md "What a reservation costs"), the same moves as before:
--
--   * The events are written by a plpgsql function, whose INSERT's plan each
--     session keeps; as a SQL function called with PERFORM (0012, 0015) it
--     was parsed and planned again on every call, and so was the checksum
--     function inside it.
--   * fencegate_reserve inserts with ON CONFLICT DO NOTHING on the live-key
--     index instead of catching unique_violation: the EXCEPTION block made a
--     subtransaction on every reservation.
--   * fencegate_reserve takes its account's quota row last, just before its
--     commit: every reservation of an account updates that one row, and the
--     row stays locked until the transaction ends, so the shorter the time
--     between the UPDATE and the commit, the less the account's other
--     reservations and commits wait.

CREATE OR REPLACE FUNCTION fencegate_reservation_event(r reservations, p_event text) RETURNS void
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO reservation_events (reservation_id, event, bucket, key, size, etag, generation, metadata, checksum)
        VALUES (r.reservation_id, p_event, r.bucket, r.key, r.size, r.etag, r.generation, r.metadata,
            CASE WHEN p_event <> 'reservation.committed' THEN NULL
                 WHEN r.sha256 IS NOT NULL THEN 'sha256:' || r.sha256
                 WHEN r.crc32c IS NOT NULL THEN 'crc32c:' || r.crc32c
                 WHEN r.crc64nvme IS NOT NULL THEN 'crc64nvme:' || r.crc64nvme END);
END $$;

CREATE OR REPLACE FUNCTION fencegate_reserve(p_id uuid, p_bucket text, p_key text, p_access_key text, p_account text,
        p_exact bigint, p_max bigint, p_sha256 text, p_crc32c text, p_crc64nvme text, p_content_type text,
        p_metadata jsonb, p_idempotency text, p_hash text, p_ttl interval)
    RETURNS SETOF reservations LANGUAGE plpgsql AS $$
DECLARE
    v_prior reservations;
    v_bytes bigint := coalesce(p_exact, p_max, 0);
    v_row   reservations;
BEGIN
    IF p_idempotency IS NOT NULL THEN
        -- Serializes the makers of one idempotency key: the second waits for
        -- the first's transaction, then finds its row.
        PERFORM pg_advisory_xact_lock(hashtextextended('fencegate-reserve:' || p_access_key || ':' || p_idempotency, 0));
        SELECT * INTO v_prior FROM reservations WHERE access_key_id = p_access_key AND idempotency_key = p_idempotency;
        IF FOUND THEN
            IF v_prior.request_hash <> p_hash THEN
                RAISE EXCEPTION 'idempotency key reused with a different request' USING ERRCODE = 'unique_violation',
                    HINT = 'fencegate:idempotency';
            END IF;
            RETURN NEXT v_prior;
            RETURN;
        END IF;
    END IF;
    IF p_account IS NOT NULL AND NOT EXISTS (SELECT 1 FROM quotas WHERE account = p_account) THEN
        RAISE EXCEPTION 'no such quota account %', p_account USING ERRCODE = 'foreign_key_violation',
            HINT = 'fencegate:no-account';
    END IF;
    INSERT INTO reservations (reservation_id, bucket, key, access_key_id, account, exact_size, max_size,
            reserved_bytes, sha256, crc32c, crc64nvme, content_type, metadata, idempotency_key, request_hash, expires_at)
        VALUES (p_id, p_bucket, p_key, p_access_key, p_account, p_exact, p_max, v_bytes, p_sha256, p_crc32c, p_crc64nvme,
            coalesce(p_content_type, ''), p_metadata, p_idempotency, p_hash, clock_timestamp() + p_ttl)
        ON CONFLICT (bucket, key) WHERE state = 'reserved' DO NOTHING
        RETURNING * INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'key %/% has a live reservation', p_bucket, p_key USING ERRCODE = 'unique_violation',
            HINT = 'fencegate:key-reserved';
    END IF;
    PERFORM fencegate_reservation_event(v_row, 'reservation.created');
    IF p_account IS NOT NULL THEN
        -- Last: the row stays locked until the commit (see above). The
        -- condition is the limit, checked by the UPDATE itself, never a
        -- read-then-write; a refusal rolls the insert back.
        UPDATE quotas SET reserved_bytes = reserved_bytes + v_bytes, reserved_objects = reserved_objects + 1,
                updated_at = clock_timestamp()
            WHERE account = p_account
              AND reserved_bytes + used_bytes + v_bytes <= limit_bytes
              AND (limit_objects IS NULL OR reserved_objects + used_objects + 1 <= limit_objects);
        IF NOT FOUND THEN
            RAISE EXCEPTION 'quota exceeded for account %', p_account USING ERRCODE = 'disk_full',
                HINT = 'fencegate:quota';
        END IF;
    END IF;
    RETURN NEXT v_row;
END $$;
