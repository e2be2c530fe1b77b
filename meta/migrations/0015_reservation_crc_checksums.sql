-- CRC32C and CRC64NVME expected checksums for reservations
-- (docs/RESERVATIONS.md), beside the SHA-256 of 0012: each a base64 value as
-- S3's x-amz-checksum-crc32c / x-amz-checksum-crc64nvme carry it. A
-- reservation names at most one of the three; existing rows name at most the
-- SHA-256, so they satisfy the constraint.
ALTER TABLE reservations ADD COLUMN crc32c text, ADD COLUMN crc64nvme text,
    ADD CONSTRAINT reservations_one_checksum CHECK (num_nonnulls(sha256, crc32c, crc64nvme) <= 1);

-- The reservation.committed event records the checksum its bytes were
-- verified against ("crc32c:<base64>", as store.ChecksumValue writes it):
-- the reservation's own, which a PUT under it had to declare (its body
-- verified against it on the stream) and complete compared with the store's.
-- NULL when the reservation names none, and on the other events.
ALTER TABLE reservation_events ADD COLUMN checksum text;

CREATE FUNCTION fencegate_reservation_checksum(r reservations) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN r.sha256 IS NOT NULL THEN 'sha256:' || r.sha256
                WHEN r.crc32c IS NOT NULL THEN 'crc32c:' || r.crc32c
                WHEN r.crc64nvme IS NOT NULL THEN 'crc64nvme:' || r.crc64nvme END;
$$;

CREATE OR REPLACE FUNCTION fencegate_reservation_event(r reservations, p_event text) RETURNS void LANGUAGE sql AS $$
    INSERT INTO reservation_events (reservation_id, event, bucket, key, size, etag, generation, metadata, checksum)
        VALUES (r.reservation_id, p_event, r.bucket, r.key, r.size, r.etag, r.generation, r.metadata,
            CASE WHEN p_event = 'reservation.committed' THEN fencegate_reservation_checksum(r) END);
$$;

-- fencegate_reserve (0012) takes the two new checksums.
DROP FUNCTION fencegate_reserve(uuid, text, text, text, text, bigint, bigint, text, text, jsonb, text, text, interval);
CREATE FUNCTION fencegate_reserve(p_id uuid, p_bucket text, p_key text, p_access_key text, p_account text,
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
    IF p_account IS NOT NULL THEN
        UPDATE quotas SET reserved_bytes = reserved_bytes + v_bytes, reserved_objects = reserved_objects + 1,
                updated_at = clock_timestamp()
            WHERE account = p_account
              AND reserved_bytes + used_bytes + v_bytes <= limit_bytes
              AND (limit_objects IS NULL OR reserved_objects + used_objects + 1 <= limit_objects);
        IF NOT FOUND THEN
            IF NOT EXISTS (SELECT 1 FROM quotas WHERE account = p_account) THEN
                RAISE EXCEPTION 'no such quota account %', p_account USING ERRCODE = 'foreign_key_violation',
                    HINT = 'fencegate:no-account';
            END IF;
            RAISE EXCEPTION 'quota exceeded for account %', p_account USING ERRCODE = 'disk_full',
                HINT = 'fencegate:quota';
        END IF;
    END IF;
    BEGIN
        INSERT INTO reservations (reservation_id, bucket, key, access_key_id, account, exact_size, max_size,
                reserved_bytes, sha256, crc32c, crc64nvme, content_type, metadata, idempotency_key, request_hash, expires_at)
            VALUES (p_id, p_bucket, p_key, p_access_key, p_account, p_exact, p_max, v_bytes, p_sha256, p_crc32c, p_crc64nvme,
                coalesce(p_content_type, ''), p_metadata, p_idempotency, p_hash, clock_timestamp() + p_ttl)
            RETURNING * INTO v_row;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'key %/% has a live reservation', p_bucket, p_key USING ERRCODE = 'unique_violation',
            HINT = 'fencegate:key-reserved';
    END;
    PERFORM fencegate_reservation_event(v_row, 'reservation.created');
    RETURN NEXT v_row;
END $$;
