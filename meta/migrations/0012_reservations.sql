-- Upload reservations and quotas (docs/RESERVATIONS.md).
--
-- A reservation grants one upload of a server-chosen key: bucket and key,
-- expected size (exact or a maximum), optional SHA-256, an expiry, and the
-- bytes it holds in its quota account. It moves reserved -> committed (the
-- generation of a write made under it commits, in the same transaction),
-- or reserved -> expired / cancelled (claimed first by the sweeper or a
-- cancel, its quota released), or reserved -> failed (never committable).

-- A key may reserve uploads on a bucket (`reserve:BUCKET`).
ALTER TABLE access_grants DROP CONSTRAINT access_grants_permission_check;
ALTER TABLE access_grants ADD CONSTRAINT access_grants_permission_check
    CHECK (permission IN ('read', 'write', 'admin', 'reserve'));

-- One row per quota account. reserved_bytes + used_bytes never exceeds
-- limit_bytes by a reservation: fencegate_reserve adds to reserved_bytes with
-- a conditional UPDATE (never a read-then-write). used_bytes follows the
-- catalog's sizes of the account's committed objects, so an overwrite or a
-- delete through the gateway lowers it.
CREATE TABLE quotas (
    account          text PRIMARY KEY CHECK (account <> ''),
    limit_bytes      bigint NOT NULL CHECK (limit_bytes >= 0),
    limit_objects    bigint CHECK (limit_objects >= 0),
    reserved_bytes   bigint NOT NULL DEFAULT 0 CHECK (reserved_bytes >= 0),
    used_bytes       bigint NOT NULL DEFAULT 0,
    reserved_objects bigint NOT NULL DEFAULT 0 CHECK (reserved_objects >= 0),
    used_objects     bigint NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE reservations (
    reservation_id  uuid PRIMARY KEY,
    bucket          text NOT NULL,
    key             text NOT NULL,
    access_key_id   text NOT NULL,
    account         text REFERENCES quotas ON DELETE RESTRICT,
    exact_size      bigint CHECK (exact_size >= 0),
    max_size        bigint CHECK (max_size >= 0),
    reserved_bytes  bigint NOT NULL CHECK (reserved_bytes >= 0),
    sha256          text,
    content_type    text NOT NULL DEFAULT '',
    metadata        jsonb,
    idempotency_key text,
    request_hash    text NOT NULL,
    state           text NOT NULL DEFAULT 'reserved'
        CHECK (state IN ('reserved', 'committed', 'expired', 'cancelled', 'failed')),
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at        timestamptz,
    -- Once committed: what the store holds, as verified on the stream.
    size            bigint,
    etag            text,
    generation      bigint,
    -- The committed object left the account's used bytes (overwritten or
    -- deleted through the gateway).
    released_at     timestamptz,
    -- The sweeper's claim (lease/lifecycle.go's kinds: a token, a deadline,
    -- tries counted before any storage I/O).
    claim_token     uuid,
    claimed_until   timestamptz,
    tries           integer NOT NULL DEFAULT 0,
    last_error      text,
    swept_at        timestamptz,
    CHECK (exact_size IS NULL OR max_size IS NULL)
);
-- One live reservation per key.
CREATE UNIQUE INDEX reservations_live_key ON reservations (bucket, key) WHERE state = 'reserved';
CREATE UNIQUE INDEX reservations_idempotency ON reservations (access_key_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX reservations_expiry ON reservations (expires_at) WHERE state = 'reserved';
CREATE INDEX reservations_unswept ON reservations (ended_at) WHERE state IN ('expired', 'cancelled') AND swept_at IS NULL;
CREATE INDEX reservations_bucket_key ON reservations (bucket, key, created_at);
CREATE INDEX reservations_generation ON reservations (bucket, key, generation) WHERE state = 'committed';

-- The attempts (write-protocol tries) made under a reservation, bound before
-- any byte of them reaches the store. A generation of a bound attempt commits
-- its reservation, or does not commit at all.
CREATE TABLE reservation_attempts (
    attempt_id     uuid PRIMARY KEY,
    reservation_id uuid NOT NULL REFERENCES reservations ON DELETE CASCADE,
    bound_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX reservation_attempts_reservation ON reservation_attempts (reservation_id);

-- The reservations' events (reservation.created, .committed, .expired,
-- .cancelled), each with the reservation's application metadata; written in
-- the transaction of the change they report.
CREATE TABLE reservation_events (
    id             bigserial PRIMARY KEY,
    reservation_id uuid NOT NULL,
    event          text NOT NULL,
    bucket         text NOT NULL,
    key            text NOT NULL,
    size           bigint,
    etag           text,
    generation     bigint,
    metadata       jsonb,
    at             timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION fencegate_reservation_event(r reservations, p_event text) RETURNS void LANGUAGE sql AS $$
    INSERT INTO reservation_events (reservation_id, event, bucket, key, size, etag, generation, metadata)
        VALUES (r.reservation_id, p_event, r.bucket, r.key, r.size, r.etag, r.generation, r.metadata);
$$;

-- fencegate_reserve makes a reservation, or returns the one its idempotency
-- key made (same request hash), or raises:
--   'idempotency key reused' (23505)  the key was used for another request
--   'quota exceeded'         (53400)  reserved + used would pass the limit
--   'no such quota account'  (23503)
--   'key reserved'           (23505)  the key has a live reservation
CREATE FUNCTION fencegate_reserve(p_id uuid, p_bucket text, p_key text, p_access_key text, p_account text,
        p_exact bigint, p_max bigint, p_sha256 text, p_content_type text, p_metadata jsonb,
        p_idempotency text, p_hash text, p_ttl interval)
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
                reserved_bytes, sha256, content_type, metadata, idempotency_key, request_hash, expires_at)
            VALUES (p_id, p_bucket, p_key, p_access_key, p_account, p_exact, p_max, v_bytes, p_sha256,
                coalesce(p_content_type, ''), p_metadata, p_idempotency, p_hash, clock_timestamp() + p_ttl)
            RETURNING * INTO v_row;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'key %/% has a live reservation', p_bucket, p_key USING ERRCODE = 'unique_violation',
            HINT = 'fencegate:key-reserved';
    END;
    PERFORM fencegate_reservation_event(v_row, 'reservation.created');
    RETURN NEXT v_row;
END $$;

-- fencegate_reservation_end claims a live reservation and ends it (expired or
-- cancelled), releasing its quota, in one statement's transaction; NULL when
-- it was not live (committed, already ended). p_only_expired: the sweeper
-- ends only reservations past their expiry.
CREATE FUNCTION fencegate_reservation_end(p_id uuid, p_state text, p_only_expired boolean)
    RETURNS reservations LANGUAGE plpgsql AS $$
DECLARE
    v_row reservations;
BEGIN
    UPDATE reservations SET state = p_state, ended_at = clock_timestamp()
        WHERE reservation_id = p_id AND state = 'reserved'
          AND (NOT p_only_expired OR expires_at <= clock_timestamp())
        RETURNING * INTO v_row;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_row.account IS NOT NULL THEN
        UPDATE quotas SET reserved_bytes = reserved_bytes - v_row.reserved_bytes,
                reserved_objects = reserved_objects - 1, updated_at = clock_timestamp()
            WHERE account = v_row.account;
    END IF;
    PERFORM fencegate_reservation_event(v_row, 'reservation.' || p_state);
    RETURN v_row;
END $$;

-- fencegate_reservation_generation runs in the transaction of every
-- generation (fencegate_commit, settle's adoptions, external generations),
-- before its catalog row is written:
--   * a generation of an attempt bound to a reservation commits it (state,
--     verified size and ETag, quota reserved -> used, the event); the
--     writer's own commit raises if the reservation is not live (expired,
--     cancelled, already committed: one publication per reservation) or the
--     size does not match, so the whole commit rolls back and the write ends
--     unknown; a later settle that adopts those bytes records them without
--     the reservation;
--   * a generation written by fencegate at a key with a live reservation by
--     an attempt not bound to it raises (admission refuses such writes; this
--     is the backstop);
--   * a generation that replaces a committed reservation's object (an
--     overwrite or a delete) takes its size out of the account's used bytes.
CREATE FUNCTION fencegate_reservation_generation() RETURNS trigger LANGUAGE plpgsql AS $$
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
            -- reservation stays ended (docs/RESERVATIONS.md, "What is left").
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
    UPDATE reservations SET state = 'committed', ended_at = clock_timestamp(), size = NEW.size, etag = NEW.etag,
            generation = NEW.generation
        WHERE reservation_id = v_res.reservation_id
        RETURNING * INTO v_res;
    IF v_res.account IS NOT NULL THEN
        UPDATE quotas SET reserved_bytes = reserved_bytes - v_res.reserved_bytes, used_bytes = used_bytes + NEW.size,
                reserved_objects = reserved_objects - 1, used_objects = used_objects + 1, updated_at = clock_timestamp()
            WHERE account = v_res.account;
    END IF;
    PERFORM fencegate_reservation_event(v_res, 'reservation.committed');
    RETURN NEW;
END $$;

CREATE TRIGGER generations_reservation BEFORE INSERT ON generations FOR EACH ROW
    EXECUTE FUNCTION fencegate_reservation_generation();

-- fencegate_reservation_bind records that attempt p_attempt writes under
-- p_id, before any of its bytes reach the store; false (nothing bound) when
-- the reservation is not live or belongs to another key.
CREATE FUNCTION fencegate_reservation_bind(p_id uuid, p_attempt uuid, p_bucket text, p_key text)
    RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM reservations WHERE reservation_id = p_id AND bucket = p_bucket AND key = p_key
        AND state = 'reserved' AND expires_at > clock_timestamp() FOR SHARE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO reservation_attempts (attempt_id, reservation_id) VALUES (p_attempt, p_id)
        ON CONFLICT (attempt_id) DO NOTHING;
    RETURN EXISTS (SELECT 1 FROM reservation_attempts WHERE attempt_id = p_attempt AND reservation_id = p_id);
END $$;
