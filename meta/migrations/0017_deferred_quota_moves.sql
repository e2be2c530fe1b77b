-- A commit's quota moves made at the end of its transaction (docs/COST.md,
-- "What a reservation costs"). Every reservation and every commit of an
-- account's uploads updates the account's one quota row, which stays locked
-- until the transaction ends. A commit runs in a batch of the gateway's
-- writes (meta/batch.go): made where the generation is written (0012, 0013),
-- the move locked the row from the batch's first commit through every later
-- statement of the batch and the round trip to its COMMIT, while the
-- account's reservations queued behind it. Made by a deferred trigger, the
-- move runs in the COMMIT itself: the same arithmetic, in the same
-- transaction, the row locked only while the transaction ends.
--
-- The moves, by the reservation row's change:
--   reserved -> committed        reserved -= its bytes, used += its size
--   released_at set (committed)  used -= its size (its object was
--                                overwritten or deleted through the gateway)
-- Ending a reservation (cancelled, expired) releases its reserved bytes in
-- its own statement as before (fencegate_reservation_end), and a reserve
-- takes them there too (fencegate_reserve: a conditional UPDATE, which must
-- answer at once).

CREATE FUNCTION fencegate_reservation_quota_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'reserved' AND NEW.state = 'committed' THEN
        UPDATE quotas SET reserved_bytes = reserved_bytes - NEW.reserved_bytes, used_bytes = used_bytes + NEW.size,
                reserved_objects = reserved_objects - 1, used_objects = used_objects + 1, updated_at = clock_timestamp()
            WHERE account = NEW.account;
    END IF;
    IF OLD.released_at IS NULL AND NEW.released_at IS NOT NULL THEN
        UPDATE quotas SET used_bytes = used_bytes - coalesce(NEW.size, 0),
                used_objects = used_objects - 1, updated_at = clock_timestamp()
            WHERE account = NEW.account;
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER reservations_quota_move AFTER UPDATE ON reservations
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.account IS NOT NULL AND (OLD.state = 'reserved' AND NEW.state = 'committed'
        OR OLD.released_at IS NULL AND NEW.released_at IS NOT NULL AND NEW.state = 'committed'))
    EXECUTE FUNCTION fencegate_reservation_quota_move();

-- fencegate_reservation_commit (0013) without its quota move.
CREATE OR REPLACE FUNCTION fencegate_reservation_commit(p_id uuid, p_size bigint, p_etag text, p_generation bigint)
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
    PERFORM fencegate_reservation_event(v_res, 'reservation.committed');
    RETURN v_res;
END $$;

-- The commit trigger (0013) without its release's quota move.
CREATE OR REPLACE FUNCTION fencegate_reservation_generation() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_res  reservations;
    v_prev catalog;
BEGIN
    SELECT * INTO v_prev FROM catalog WHERE bucket = NEW.bucket AND key = NEW.key;
    IF FOUND AND NOT v_prev.deleted THEN
        UPDATE reservations SET released_at = clock_timestamp()
            WHERE bucket = NEW.bucket AND key = NEW.key AND state = 'committed'
              AND generation = v_prev.generation AND released_at IS NULL;
    END IF;

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
