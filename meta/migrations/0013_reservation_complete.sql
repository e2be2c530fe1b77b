-- The explicit complete of a reservation (docs/RESERVATIONS.md): a client
-- that uploaded elsewhere, or wants to confirm, asks fencegate to commit the
-- reservation on the bytes the store holds at its key. The gateway checks
-- the store (HEAD: size, SHA-256) and settles the key through the lease
-- manager first, so the catalog records those bytes as a generation; then
-- fencegate_reservation_complete commits the reservation on that generation
-- through fencegate_reservation_commit, the same move the commit trigger
-- makes (state, size, ETag, generation, quota reserved -> used, the event).

-- fencegate_reservation_commit moves a live reservation to committed on a
-- generation: one conditional UPDATE ... WHERE state = 'reserved', its quota
-- moved from reserved to used, its event written. NULL when it was not live.
CREATE FUNCTION fencegate_reservation_commit(p_id uuid, p_size bigint, p_etag text, p_generation bigint)
    RETURNS reservations LANGUAGE plpgsql AS $$
DECLARE
    v_res reservations;
BEGIN
    UPDATE reservations SET state = 'committed', ended_at = clock_timestamp(), size = p_size, etag = p_etag,
            generation = p_generation
        WHERE reservation_id = p_id AND state = 'reserved'
        RETURNING * INTO v_res;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_res.account IS NOT NULL THEN
        UPDATE quotas SET reserved_bytes = reserved_bytes - v_res.reserved_bytes, used_bytes = used_bytes + p_size,
                reserved_objects = reserved_objects - 1, used_objects = used_objects + 1, updated_at = clock_timestamp()
            WHERE account = v_res.account;
    END IF;
    PERFORM fencegate_reservation_event(v_res, 'reservation.committed');
    RETURN v_res;
END $$;

-- The commit trigger (0012), its move now fencegate_reservation_commit's.
CREATE OR REPLACE FUNCTION fencegate_reservation_generation() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_res  reservations;
    v_prev catalog;
BEGIN
    SELECT * INTO v_prev FROM catalog WHERE bucket = NEW.bucket AND key = NEW.key;
    IF FOUND AND NOT v_prev.deleted THEN
        UPDATE reservations SET released_at = clock_timestamp()
            WHERE bucket = NEW.bucket AND key = NEW.key AND state = 'committed'
              AND generation = v_prev.generation AND released_at IS NULL
            RETURNING * INTO v_res;
        IF FOUND AND v_res.account IS NOT NULL THEN
            UPDATE quotas SET used_bytes = used_bytes - coalesce(v_prev.size, v_res.size, 0),
                    used_objects = used_objects - 1, updated_at = clock_timestamp()
                WHERE account = v_res.account;
        END IF;
    END IF;

    v_res := NULL;
    IF NEW.attempt_id IS NOT NULL THEN
        SELECT r.* INTO v_res FROM reservation_attempts a JOIN reservations r USING (reservation_id)
            WHERE a.attempt_id = NEW.attempt_id FOR UPDATE OF r;
    END IF;
    IF v_res.reservation_id IS NULL THEN
        IF NEW.origin = 'fencegate' AND NOT NEW.deleted AND EXISTS (
                SELECT 1 FROM reservations WHERE bucket = NEW.bucket AND key = NEW.key AND state = 'reserved') THEN
            RAISE EXCEPTION 'key %/% is reserved by another upload', NEW.bucket, NEW.key
                USING ERRCODE = 'check_violation', HINT = 'fencegate:key-reserved';
        END IF;
        RETURN NEW;
    END IF;
    IF v_res.state <> 'reserved' OR v_res.expires_at <= clock_timestamp() THEN
        IF NEW.origin <> 'fencegate' THEN
            -- Settling found the bytes of a write the commit refused (its
            -- attempt was left unknown): they are recorded as they are, so
            -- the key stays writable and nothing is untracked; the
            -- reservation stays ended and the sweeper deletes them.
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'reservation % is %', v_res.reservation_id,
            CASE WHEN v_res.state = 'reserved' THEN 'expired' ELSE v_res.state END
            USING ERRCODE = 'check_violation', HINT = 'fencegate:reservation-ended';
    END IF;
    IF NEW.deleted OR NEW.size IS NULL OR NEW.size <> coalesce(v_res.exact_size, NEW.size)
            OR NEW.size > coalesce(v_res.max_size, NEW.size) THEN
        RAISE EXCEPTION 'reservation % does not match the write (size %)', v_res.reservation_id, NEW.size
            USING ERRCODE = 'check_violation', HINT = 'fencegate:reservation-mismatch';
    END IF;
    PERFORM fencegate_reservation_commit(v_res.reservation_id, NEW.size, NEW.etag, NEW.generation);
    RETURN NEW;
END $$;

-- fencegate_reservation_complete commits a live reservation on the key's
-- current generation when that generation is the bytes the caller verified
-- at the store (p_etag, p_size), was recorded after the reservation was made,
-- and is no other reservation's. It answers what happened, the reservation
-- left as it was unless 'committed':
--   'committed'  committed now, or already (by its PUT, or a settle's adoption)
--   'expired', 'cancelled', 'failed'  ended; past its expiry counts as expired
--   'unsettled'  the catalog's current generation is not the verified bytes
--   'mismatch'   the bytes' size is not the reservation's
--   NULL         no such reservation
-- It locks the reservation as the commit trigger does, so a sweep racing it
-- ends the reservation before (the complete answers 'expired') or skips it.
CREATE FUNCTION fencegate_reservation_complete(p_id uuid, p_etag text, p_size bigint)
    RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_res reservations;
    v_cur catalog;
BEGIN
    SELECT * INTO v_res FROM reservations WHERE reservation_id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_res.state <> 'reserved' THEN
        RETURN v_res.state;
    END IF;
    IF v_res.expires_at <= clock_timestamp() THEN
        RETURN 'expired';
    END IF;
    SELECT * INTO v_cur FROM catalog WHERE bucket = v_res.bucket AND key = v_res.key AND NOT deleted;
    IF NOT FOUND OR v_cur.etag IS DISTINCT FROM p_etag OR v_cur.size IS DISTINCT FROM p_size
            OR v_cur.committed_at < v_res.created_at
            OR EXISTS (SELECT 1 FROM reservation_attempts
                WHERE attempt_id = v_cur.attempt_id AND reservation_id <> p_id) THEN
        RETURN 'unsettled';
    END IF;
    IF v_cur.size <> coalesce(v_res.exact_size, v_cur.size) OR v_cur.size > coalesce(v_res.max_size, v_cur.size) THEN
        RETURN 'mismatch';
    END IF;
    PERFORM fencegate_reservation_commit(p_id, v_cur.size, v_cur.etag, v_cur.generation);
    RETURN 'committed';
END $$;

-- Pruning (meta's Prune, the lifecycle service's prune kind) deletes ended
-- reservations past the attempts' retention, oldest end first.
CREATE INDEX reservations_ended ON reservations (ended_at) WHERE state <> 'reserved';
