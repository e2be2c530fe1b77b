-- The write path's statements and index entries (docs/COST.md, "PostgreSQL's
-- write path", issue 35).
--
-- 1. The generations trigger (0012, 0013, 0017) ran three or four statements
--    on every commit, reservations in use or not: the key's catalog row (to
--    release a reservation's used bytes when its object is overwritten), an
--    update of reservations for that, the write's bound reservation, and
--    whether another upload reserves the key. Each needs a reservation row
--    of the key (reservations_bucket_key). A key that never had one now
--    costs one index probe; a key that has one (live, ended or committed and
--    not yet pruned) runs the checks as before.
--
-- 2. attempts_reconcile (updated_at, partial on leased and unknown) took an
--    index entry on every attempt's insert. Its reader, the reconciler's
--    claim (meta/catalog.go ClaimUnresolved), orders by
--    coalesce(claimed_until, updated_at), which the index cannot give, so it
--    used the index only to find the unresolved rows; attempts_unresolved
--    ((bucket, key), the same predicate) finds the same rows.

CREATE OR REPLACE FUNCTION fencegate_reservation_generation() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_res  reservations;
    v_prev catalog;
BEGIN
    -- A key that has no reservation row has nothing here to check or
    -- release: no reservation committed its object (none to release), none
    -- is bound to this write (a binding names its reservation's own key) and
    -- none is reserving the key. One index probe instead of three or four.
    IF NOT EXISTS (SELECT 1 FROM reservations WHERE bucket = NEW.bucket AND key = NEW.key) THEN
        RETURN NEW;
    END IF;
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

DROP INDEX attempts_reconcile;
