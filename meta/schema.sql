-- The schema after every migration in meta/migrations: pg_dump --schema-only
-- of a freshly migrated database, without owners, privileges and the dump's
-- session settings. Generated; do not edit. `make schema` regenerates it and
-- `make lint` (TestSchemaFileIsCurrent) refuses one that is out of date.

CREATE TYPE public.fencegate_attempt_op AS ENUM (
    'put',
    'copy',
    'complete',
    'delete',
    'multipart'
);

CREATE TYPE public.fencegate_attempt_state AS ENUM (
    'leased',
    'open',
    'committed',
    'adopted',
    'unknown',
    'failed',
    'aborted'
);

CREATE TYPE public.fencegate_origin AS ENUM (
    'fencegate',
    'adopted',
    'external'
);

CREATE FUNCTION public.fencegate_acquire(p_bucket text, p_key text, p_holder uuid, p_ttl interval, p_mode text, p_op text, p_gateway text, p_size bigint, p_checksum text, p_upload_attempt uuid, p_session uuid, p_wait boolean DEFAULT false, OUT acquired boolean, OUT dead_session_for double precision, OUT holder_live_for double precision) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_holder  uuid;
    v_expires timestamptz;
    v_session uuid;
    v_wakeup  text;
    v_mark    text;
    v_found   boolean := false; -- the key's row was there (locked)
    v_new     boolean := false; -- this call inserted it, leased to p_holder
    v_yield_from  text;
    v_yield_until timestamptz;
BEGIN
    acquired := false;
    FOR i IN 1..2 LOOP
        SELECT holder, expires_at, session, wakeup, yield_from, yield_until
            INTO v_holder, v_expires, v_session, v_wakeup, v_yield_from, v_yield_until
            FROM leases WHERE bucket = p_bucket AND key = p_key FOR UPDATE;
        v_found := FOUND;
        EXIT WHEN v_found;
        INSERT INTO leases (bucket, key, holder, expires_at, session)
            VALUES (p_bucket, p_key, p_holder, clock_timestamp() + p_ttl, p_session) ON CONFLICT DO NOTHING;
        v_new := FOUND;
        EXIT WHEN v_new;
        -- Another writer inserted it first (the insert waited for its
        -- commit): read its row like any other, so a waiter marks it.
    END LOOP;
    IF v_new THEN
        NULL;
    ELSIF NOT v_found THEN
        RETURN; -- inserted by another writer and pruned again, twice: busy
    ELSIF v_holder = p_holder AND fencegate_lease_live(v_holder, v_expires, v_session) THEN
        -- The caller holds it already: an earlier call (or a hand-over) took
        -- it and its answer was lost. It keeps the lease it has.
        UPDATE leases SET expires_at = clock_timestamp() + p_ttl WHERE bucket = p_bucket AND key = p_key;
    ELSIF fencegate_lease_live(v_holder, v_expires, v_session)
            OR (v_yield_from = p_gateway AND v_yield_until > clock_timestamp()) THEN
        -- Held by a live writer, or free while this gateway yields it to
        -- the others (its last holder's gateway, see above).
        holder_live_for := extract(epoch FROM coalesce(least(v_expires,
            (SELECT s.expires_at FROM sessions s WHERE s.session_id = v_session)), v_yield_until) - clock_timestamp());
        IF p_wait THEN
            v_mark := CASE WHEN v_wakeup IS NULL OR v_wakeup = p_gateway THEN p_gateway ELSE '*' END;
            IF v_mark IS DISTINCT FROM v_wakeup THEN
                UPDATE leases SET wakeup = v_mark WHERE bucket = p_bucket AND key = p_key;
            END IF;
        END IF;
        RETURN;
    ELSE
        IF v_holder IS NOT NULL AND v_session IS NOT NULL THEN
            SELECT extract(epoch FROM clock_timestamp() - coalesce(s.ended_at, s.heartbeat_at)) INTO dead_session_for
                FROM sessions s WHERE s.session_id = v_session
                  AND (s.ended_at IS NOT NULL OR s.expires_at <= clock_timestamp());
        END IF;
        UPDATE leases SET holder = p_holder, expires_at = clock_timestamp() + p_ttl, progress_at = NULL, session = p_session,
                yield_from = NULL, yield_until = NULL
            WHERE bucket = p_bucket AND key = p_key;
        IF v_holder IS NOT NULL THEN
            -- the previous holder lost its lease: it may have landed
            UPDATE attempts SET state = 'unknown', reason = 'lease expired', updated_at = clock_timestamp()
                WHERE attempt_id = v_holder AND state = 'leased';
        END IF;
    END IF;
    IF p_mode = 'new' THEN
        INSERT INTO attempts (attempt_id, bucket, key, op, state, gateway, declared_size, checksum, upload_attempt)
            VALUES (p_holder, p_bucket, p_key, p_op, 'leased', p_gateway, p_size, nullif(p_checksum, ''), p_upload_attempt)
            ON CONFLICT (attempt_id) DO NOTHING;
        -- The id may be this holder's own attempt, recorded by the call whose
        -- answer was lost; an id of another key's attempt is refused.
        IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM attempts
                WHERE attempt_id = p_holder AND bucket = p_bucket AND key = p_key) THEN
            RAISE EXCEPTION 'attempt % belongs to another key', p_holder USING ERRCODE = 'unique_violation';
        END IF;
    END IF;
    acquired := true;
END $$;

CREATE FUNCTION public.fencegate_attempt_unknown() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.unknown_at := clock_timestamp();
    RETURN NEW;
END $$;

CREATE FUNCTION public.fencegate_commit(p_bucket text, p_key text, p_holder uuid, p_settled uuid, p_settled_state text, p_etag text, p_size bigint, p_attempt uuid, p_deleted boolean, p_origin text, p_release boolean) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION public.fencegate_commit_hand_over(p_bucket text, p_key text, p_holder uuid, p_settled uuid, p_settled_state text, p_etag text, p_size bigint, p_attempt uuid, p_deleted boolean, p_origin text, p_next uuid, p_ttl interval, p_op text, p_gateway text, p_next_size bigint, p_checksum text, p_upload_attempt uuid, p_session uuid, OUT generation bigint, OUT acquired boolean) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_mark text;
BEGIN
    acquired := false;
    SELECT wakeup INTO v_mark FROM leases WHERE bucket = p_bucket AND key = p_key FOR UPDATE;
    generation := fencegate_commit(p_bucket, p_key, p_holder, p_settled, p_settled_state,
        p_etag, p_size, p_attempt, p_deleted, p_origin, true);
    IF generation IS NULL OR (v_mark IS NOT NULL AND v_mark <> p_gateway) THEN
        RETURN;
    END IF;
    SELECT a.acquired INTO acquired FROM fencegate_acquire(p_bucket, p_key, p_next, p_ttl, 'new',
        p_op, p_gateway, p_next_size, p_checksum, p_upload_attempt, p_session, false) a;
END $$;

CREATE FUNCTION public.fencegate_key_hash(p_bucket text, p_key text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT left(encode(sha256(convert_to(p_bucket || '/' || p_key, 'UTF8')), 'hex'), 16)
$$;

CREATE FUNCTION public.fencegate_lease_live(p_holder uuid, p_expires timestamp with time zone, p_session uuid) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_holder IS NULL OR NOT coalesce(p_expires > clock_timestamp(), false) THEN
        RETURN false;
    END IF;
    IF p_session IS NULL THEN
        RETURN true;
    END IF;
    RETURN EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = p_session
        AND s.ended_at IS NULL AND s.expires_at > clock_timestamp());
END $$;

CREATE FUNCTION public.fencegate_lease_released() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_gateway text;
BEGIN
    SELECT gateway INTO v_gateway FROM attempts WHERE attempt_id = OLD.holder;
    IF OLD.wakeup = '*' OR v_gateway IS DISTINCT FROM OLD.wakeup THEN
        PERFORM pg_notify('fencegate_lease_released', fencegate_key_hash(OLD.bucket, OLD.key));
        IF v_gateway IS NOT NULL THEN
            NEW.yield_from := v_gateway;
            NEW.yield_until := clock_timestamp() + interval '1 second';
        END IF;
    END IF;
    NEW.wakeup := NULL;
    RETURN NEW;
END $$;

CREATE FUNCTION public.fencegate_notify_fanout() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_op   text;
    v_name text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM bucket_notifications WHERE bucket = NEW.bucket) THEN
        RETURN NULL;
    END IF;
    IF NEW.deleted THEN
        v_name := 'ObjectRemoved:Delete';
    ELSE
        SELECT op INTO v_op FROM attempts WHERE attempt_id = NEW.attempt_id;
        v_name := CASE v_op WHEN 'copy' THEN 'ObjectCreated:Copy'
                            WHEN 'complete' THEN 'ObjectCreated:CompleteMultipartUpload'
                            WHEN 'multipart' THEN 'ObjectCreated:CompleteMultipartUpload'
                            ELSE 'ObjectCreated:Put' END;
    END IF;
    INSERT INTO notify_queue (target, outbox_id, event_name, bucket, key, generation, etag, size, attempt_id, committed_at)
        SELECT DISTINCT n.target, NEW.id, v_name, NEW.bucket, NEW.key, NEW.generation, NEW.etag, NEW.size, NEW.attempt_id, NEW.committed_at
        FROM bucket_notifications n
        WHERE n.bucket = NEW.bucket
          AND left(NEW.key, length(n.prefix)) = n.prefix
          AND right(NEW.key, length(n.suffix)) = n.suffix
          AND ('s3:' || v_name = ANY (n.events) OR 's3:' || split_part(v_name, ':', 1) || ':*' = ANY (n.events));
    RETURN NULL;
END $$;

CREATE FUNCTION public.fencegate_reservation_bind(p_id uuid, p_attempt uuid, p_bucket text, p_key text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
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

CREATE TABLE public.reservations (
    reservation_id uuid NOT NULL,
    bucket text NOT NULL,
    key text NOT NULL,
    access_key_id text NOT NULL,
    account text,
    exact_size bigint,
    max_size bigint,
    reserved_bytes bigint NOT NULL,
    sha256 text,
    content_type text DEFAULT ''::text NOT NULL,
    metadata jsonb,
    idempotency_key text,
    request_hash text NOT NULL,
    state text DEFAULT 'reserved'::text NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    ended_at timestamp with time zone,
    size bigint,
    etag text,
    generation bigint,
    released_at timestamp with time zone,
    claim_token uuid,
    claimed_until timestamp with time zone,
    tries integer DEFAULT 0 NOT NULL,
    last_error text,
    swept_at timestamp with time zone,
    crc32c text,
    crc64nvme text,
    claim_session uuid,
    CONSTRAINT reservations_check CHECK (((exact_size IS NULL) OR (max_size IS NULL))),
    CONSTRAINT reservations_exact_size_check CHECK ((exact_size >= 0)),
    CONSTRAINT reservations_max_size_check CHECK ((max_size >= 0)),
    CONSTRAINT reservations_one_checksum CHECK ((num_nonnulls(sha256, crc32c, crc64nvme) <= 1)),
    CONSTRAINT reservations_reserved_bytes_check CHECK ((reserved_bytes >= 0)),
    CONSTRAINT reservations_state_check CHECK ((state = ANY (ARRAY['reserved'::text, 'committed'::text, 'expired'::text, 'cancelled'::text, 'failed'::text])))
);

CREATE FUNCTION public.fencegate_reservation_checksum(r public.reservations) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN r.sha256 IS NOT NULL THEN 'sha256:' || r.sha256
                WHEN r.crc32c IS NOT NULL THEN 'crc32c:' || r.crc32c
                WHEN r.crc64nvme IS NOT NULL THEN 'crc64nvme:' || r.crc64nvme END;
$$;

CREATE FUNCTION public.fencegate_reservation_commit(p_id uuid, p_size bigint, p_etag text, p_generation bigint) RETURNS public.reservations
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION public.fencegate_reservation_complete(p_id uuid, p_etag text, p_size bigint) RETURNS text
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION public.fencegate_reservation_end(p_id uuid, p_state text, p_only_expired boolean) RETURNS public.reservations
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION public.fencegate_reservation_event(r public.reservations, p_event text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO reservation_events (reservation_id, event, bucket, key, size, etag, generation, metadata, checksum)
        VALUES (r.reservation_id, p_event, r.bucket, r.key, r.size, r.etag, r.generation, r.metadata,
            CASE WHEN p_event <> 'reservation.committed' THEN NULL
                 WHEN r.sha256 IS NOT NULL THEN 'sha256:' || r.sha256
                 WHEN r.crc32c IS NOT NULL THEN 'crc32c:' || r.crc32c
                 WHEN r.crc64nvme IS NOT NULL THEN 'crc64nvme:' || r.crc64nvme END);
END $$;

CREATE FUNCTION public.fencegate_reservation_generation() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION public.fencegate_reservation_quota_move() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION public.fencegate_reserve(p_id uuid, p_bucket text, p_key text, p_access_key text, p_account text, p_exact bigint, p_max bigint, p_sha256 text, p_crc32c text, p_crc64nvme text, p_content_type text, p_metadata jsonb, p_idempotency text, p_hash text, p_ttl interval) RETURNS SETOF public.reservations
    LANGUAGE plpgsql
    AS $$
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

CREATE TABLE public.access_grants (
    access_key_id text NOT NULL,
    bucket text NOT NULL,
    permission text NOT NULL,
    CONSTRAINT access_grants_permission_check CHECK ((permission = ANY (ARRAY['read'::text, 'write'::text, 'admin'::text, 'reserve'::text])))
);

CREATE TABLE public.access_keys (
    access_key_id text NOT NULL,
    secret_sealed bytea NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT access_keys_access_key_id_check CHECK ((access_key_id ~ '^[A-Z0-9]{16,128}$'::text))
);

CREATE TABLE public.access_keys_version (
    singleton boolean DEFAULT true NOT NULL,
    version bigint NOT NULL,
    CONSTRAINT access_keys_version_singleton_check CHECK (singleton)
);

CREATE TABLE public.attempts (
    attempt_id uuid NOT NULL,
    bucket text NOT NULL,
    key text NOT NULL,
    op text NOT NULL,
    state text NOT NULL,
    gateway text NOT NULL,
    declared_size bigint,
    checksum text,
    upload_id text,
    generation bigint,
    etag text,
    reason text,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    claim_token uuid,
    claimed_until timestamp with time zone,
    tries integer DEFAULT 0 NOT NULL,
    last_error text,
    upload_attempt uuid,
    fence text,
    activity_at timestamp with time zone,
    unknown_at timestamp with time zone,
    claim_session uuid
);

CREATE TABLE public.audit_cursors (
    bucket text NOT NULL,
    marker text DEFAULT ''::text NOT NULL,
    after_key text DEFAULT ''::text NOT NULL,
    upload_key text DEFAULT ''::text NOT NULL,
    upload_id text DEFAULT ''::text NOT NULL,
    rounds integer DEFAULT 0 NOT NULL,
    claim_token uuid,
    claimed_until timestamp with time zone,
    tries integer DEFAULT 0 NOT NULL,
    last_error text,
    passed_at timestamp with time zone,
    claim_session uuid
);

CREATE TABLE public.bucket_notifications (
    bucket text NOT NULL,
    "position" integer NOT NULL,
    id text NOT NULL,
    kind text NOT NULL,
    target text NOT NULL,
    events text[] NOT NULL,
    prefix text DEFAULT ''::text NOT NULL,
    suffix text DEFAULT ''::text NOT NULL,
    CONSTRAINT bucket_notifications_kind_check CHECK ((kind = ANY (ARRAY['queue'::text, 'topic'::text])))
);

CREATE TABLE public.buckets (
    bucket text NOT NULL,
    complete boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.catalog (
    bucket text NOT NULL,
    key text NOT NULL,
    generation bigint NOT NULL,
    etag text,
    size bigint,
    attempt_id uuid,
    deleted boolean DEFAULT false NOT NULL,
    origin text NOT NULL,
    committed_at timestamp with time zone NOT NULL
);

CREATE TABLE public.foreign_uploads (
    bucket text NOT NULL,
    key text NOT NULL,
    upload_id text NOT NULL,
    initiated timestamp with time zone,
    first_seen timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    last_seen timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    aborted_at timestamp with time zone
);

CREATE SEQUENCE public.generation_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

CREATE TABLE public.generations (
    bucket text NOT NULL,
    key text NOT NULL,
    generation bigint NOT NULL,
    etag text,
    size bigint,
    attempt_id uuid,
    deleted boolean DEFAULT false NOT NULL,
    origin text NOT NULL,
    committed_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.leases (
    bucket text NOT NULL,
    key text NOT NULL,
    holder uuid,
    expires_at timestamp with time zone,
    progress_at timestamp with time zone,
    session uuid,
    wakeup text,
    yield_from text,
    yield_until timestamp with time zone
);

CREATE TABLE public.notify_claims (
    target text NOT NULL,
    holder uuid NOT NULL,
    claimed_until timestamp with time zone NOT NULL
);

CREATE TABLE public.notify_dead_letters (
    id bigint NOT NULL,
    target text NOT NULL,
    outbox_id bigint NOT NULL,
    event_name text NOT NULL,
    bucket text NOT NULL,
    key text NOT NULL,
    generation bigint NOT NULL,
    etag text,
    size bigint,
    attempt_id uuid,
    committed_at timestamp with time zone NOT NULL,
    tries integer NOT NULL,
    last_error text,
    dead_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.notify_queue (
    id bigint NOT NULL,
    target text NOT NULL,
    outbox_id bigint NOT NULL,
    event_name text NOT NULL,
    bucket text NOT NULL,
    key text NOT NULL,
    generation bigint NOT NULL,
    etag text,
    size bigint,
    attempt_id uuid,
    committed_at timestamp with time zone NOT NULL,
    tries integer DEFAULT 0 NOT NULL,
    next_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    last_error text
);

CREATE SEQUENCE public.notify_queue_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.notify_queue_id_seq OWNED BY public.notify_queue.id;

CREATE TABLE public.notify_targets (
    name text NOT NULL,
    kind text NOT NULL,
    url text NOT NULL,
    subject text DEFAULT ''::text NOT NULL,
    secret_sealed bytea,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT notify_targets_kind_check CHECK ((kind = ANY (ARRAY['webhook'::text, 'nats'::text]))),
    CONSTRAINT notify_targets_name_check CHECK ((name ~ '^[A-Za-z0-9_-]{1,64}$'::text))
);

CREATE TABLE public.outbox (
    id bigint NOT NULL,
    bucket text NOT NULL,
    key text NOT NULL,
    generation bigint NOT NULL,
    etag text,
    size bigint,
    deleted boolean NOT NULL,
    origin text NOT NULL,
    attempt_id uuid,
    committed_at timestamp with time zone NOT NULL
);

CREATE TABLE public.outbox_consumers (
    consumer text NOT NULL,
    acked_id bigint DEFAULT 0 NOT NULL,
    acked_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE SEQUENCE public.outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.outbox_id_seq OWNED BY public.outbox.id;

CREATE TABLE public.quotas (
    account text NOT NULL,
    limit_bytes bigint NOT NULL,
    limit_objects bigint,
    reserved_bytes bigint DEFAULT 0 NOT NULL,
    used_bytes bigint DEFAULT 0 NOT NULL,
    reserved_objects bigint DEFAULT 0 NOT NULL,
    used_objects bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT quotas_account_check CHECK ((account <> ''::text)),
    CONSTRAINT quotas_limit_bytes_check CHECK ((limit_bytes >= 0)),
    CONSTRAINT quotas_limit_objects_check CHECK ((limit_objects >= 0)),
    CONSTRAINT quotas_reserved_bytes_check CHECK ((reserved_bytes >= 0)),
    CONSTRAINT quotas_reserved_objects_check CHECK ((reserved_objects >= 0))
);

CREATE TABLE public.reconciler_passes (
    kind text NOT NULL,
    gateway text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    duration_ms bigint NOT NULL,
    batches integer NOT NULL,
    claimed integer NOT NULL,
    completed integer NOT NULL,
    retried integer NOT NULL,
    skipped integer NOT NULL,
    failed integer NOT NULL
);

CREATE TABLE public.reservation_attempts (
    attempt_id uuid NOT NULL,
    reservation_id uuid NOT NULL,
    bound_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.reservation_events (
    id bigint NOT NULL,
    reservation_id uuid NOT NULL,
    event text NOT NULL,
    bucket text NOT NULL,
    key text NOT NULL,
    size bigint,
    etag text,
    generation bigint,
    metadata jsonb,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    checksum text
);

CREATE SEQUENCE public.reservation_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.reservation_events_id_seq OWNED BY public.reservation_events.id;

CREATE TABLE public.schema_version (
    version integer NOT NULL
);

CREATE TABLE public.sessions (
    session_id uuid NOT NULL,
    gateway text NOT NULL,
    started_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    ended_at timestamp with time zone
);

ALTER TABLE ONLY public.notify_queue ALTER COLUMN id SET DEFAULT nextval('public.notify_queue_id_seq'::regclass);

ALTER TABLE ONLY public.outbox ALTER COLUMN id SET DEFAULT nextval('public.outbox_id_seq'::regclass);

ALTER TABLE ONLY public.reservation_events ALTER COLUMN id SET DEFAULT nextval('public.reservation_events_id_seq'::regclass);

ALTER TABLE ONLY public.access_grants
    ADD CONSTRAINT access_grants_pkey PRIMARY KEY (access_key_id, bucket, permission);

ALTER TABLE ONLY public.access_keys
    ADD CONSTRAINT access_keys_pkey PRIMARY KEY (access_key_id);

ALTER TABLE ONLY public.access_keys_version
    ADD CONSTRAINT access_keys_version_pkey PRIMARY KEY (singleton);

ALTER TABLE public.attempts
    ADD CONSTRAINT attempts_op_check CHECK (((op)::public.fencegate_attempt_op IS NOT NULL)) NOT VALID;

ALTER TABLE ONLY public.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (attempt_id);

ALTER TABLE public.attempts
    ADD CONSTRAINT attempts_state_check CHECK (((state)::public.fencegate_attempt_state IS NOT NULL)) NOT VALID;

ALTER TABLE ONLY public.audit_cursors
    ADD CONSTRAINT audit_cursors_pkey PRIMARY KEY (bucket);

ALTER TABLE ONLY public.bucket_notifications
    ADD CONSTRAINT bucket_notifications_pkey PRIMARY KEY (bucket, "position");

ALTER TABLE ONLY public.buckets
    ADD CONSTRAINT buckets_pkey PRIMARY KEY (bucket);

ALTER TABLE public.catalog
    ADD CONSTRAINT catalog_origin_check CHECK (((origin)::public.fencegate_origin IS NOT NULL)) NOT VALID;

ALTER TABLE ONLY public.catalog
    ADD CONSTRAINT catalog_pkey PRIMARY KEY (bucket, key);

ALTER TABLE ONLY public.foreign_uploads
    ADD CONSTRAINT foreign_uploads_pkey PRIMARY KEY (upload_id);

ALTER TABLE public.generations
    ADD CONSTRAINT generations_origin_check CHECK (((origin)::public.fencegate_origin IS NOT NULL)) NOT VALID;

ALTER TABLE ONLY public.generations
    ADD CONSTRAINT generations_pkey PRIMARY KEY (bucket, key, generation);

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (bucket, key);

ALTER TABLE ONLY public.notify_claims
    ADD CONSTRAINT notify_claims_pkey PRIMARY KEY (target);

ALTER TABLE ONLY public.notify_dead_letters
    ADD CONSTRAINT notify_dead_letters_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.notify_queue
    ADD CONSTRAINT notify_queue_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.notify_targets
    ADD CONSTRAINT notify_targets_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.outbox_consumers
    ADD CONSTRAINT outbox_consumers_pkey PRIMARY KEY (consumer);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.quotas
    ADD CONSTRAINT quotas_pkey PRIMARY KEY (account);

ALTER TABLE ONLY public.reconciler_passes
    ADD CONSTRAINT reconciler_passes_pkey PRIMARY KEY (kind, gateway);

ALTER TABLE ONLY public.reservation_attempts
    ADD CONSTRAINT reservation_attempts_pkey PRIMARY KEY (attempt_id);

ALTER TABLE ONLY public.reservation_events
    ADD CONSTRAINT reservation_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.reservations
    ADD CONSTRAINT reservations_pkey PRIMARY KEY (reservation_id);

ALTER TABLE ONLY public.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (session_id);

CREATE INDEX attempts_key ON public.attempts USING btree (bucket, key, updated_at);

CREATE INDEX attempts_open_uploads ON public.attempts USING btree (updated_at) WHERE ((op = 'multipart'::text) AND (state = 'open'::text));

CREATE INDEX attempts_settled ON public.attempts USING btree (updated_at) WHERE (state = ANY (ARRAY['committed'::text, 'adopted'::text, 'failed'::text, 'aborted'::text]));

CREATE INDEX attempts_unresolved ON public.attempts USING btree (bucket, key) WHERE (state = ANY (ARRAY['leased'::text, 'unknown'::text]));

CREATE UNIQUE INDEX attempts_upload ON public.attempts USING btree (upload_id) WHERE (upload_id IS NOT NULL);

CREATE INDEX attempts_upload_attempt ON public.attempts USING btree (upload_attempt) WHERE (upload_attempt IS NOT NULL);

CREATE INDEX notify_dead_letters_target ON public.notify_dead_letters USING btree (target, id);

CREATE INDEX notify_queue_due ON public.notify_queue USING btree (target, next_at);

CREATE INDEX notify_queue_key ON public.notify_queue USING btree (target, bucket, key, id);

CREATE INDEX reservation_attempts_reservation ON public.reservation_attempts USING btree (reservation_id);

CREATE INDEX reservations_bucket_key ON public.reservations USING btree (bucket, key, created_at);

CREATE INDEX reservations_ended ON public.reservations USING btree (ended_at) WHERE (state <> 'reserved'::text);

CREATE INDEX reservations_expiry ON public.reservations USING btree (expires_at) WHERE (state = 'reserved'::text);

CREATE INDEX reservations_generation ON public.reservations USING btree (bucket, key, generation) WHERE (state = 'committed'::text);

CREATE UNIQUE INDEX reservations_idempotency ON public.reservations USING btree (access_key_id, idempotency_key) WHERE (idempotency_key IS NOT NULL);

CREATE UNIQUE INDEX reservations_live_key ON public.reservations USING btree (bucket, key) WHERE (state = 'reserved'::text);

CREATE INDEX reservations_unswept ON public.reservations USING btree (ended_at) WHERE ((state = ANY (ARRAY['expired'::text, 'cancelled'::text])) AND (swept_at IS NULL));

CREATE INDEX sessions_open ON public.sessions USING btree (expires_at) WHERE (ended_at IS NULL);

CREATE TRIGGER attempts_unknown BEFORE UPDATE OF state ON public.attempts FOR EACH ROW WHEN (((new.state = 'unknown'::text) AND (old.state IS DISTINCT FROM 'unknown'::text))) EXECUTE FUNCTION public.fencegate_attempt_unknown();

CREATE TRIGGER generations_reservation BEFORE INSERT ON public.generations FOR EACH ROW EXECUTE FUNCTION public.fencegate_reservation_generation();

CREATE TRIGGER leases_released BEFORE UPDATE ON public.leases FOR EACH ROW WHEN (((old.wakeup IS NOT NULL) AND (old.holder IS NOT NULL) AND (new.holder IS NULL))) EXECUTE FUNCTION public.fencegate_lease_released();

CREATE TRIGGER outbox_notify_fanout AFTER INSERT ON public.outbox FOR EACH ROW EXECUTE FUNCTION public.fencegate_notify_fanout();

CREATE CONSTRAINT TRIGGER reservations_quota_move AFTER UPDATE ON public.reservations DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((new.account IS NOT NULL) AND (((old.state = 'reserved'::text) AND (new.state = 'committed'::text)) OR ((old.released_at IS NULL) AND (new.released_at IS NOT NULL) AND (new.state = 'committed'::text))))) EXECUTE FUNCTION public.fencegate_reservation_quota_move();

ALTER TABLE ONLY public.access_grants
    ADD CONSTRAINT access_grants_access_key_id_fkey FOREIGN KEY (access_key_id) REFERENCES public.access_keys(access_key_id) ON DELETE CASCADE;

ALTER TABLE ONLY public.bucket_notifications
    ADD CONSTRAINT bucket_notifications_target_fkey FOREIGN KEY (target) REFERENCES public.notify_targets(name) ON DELETE RESTRICT;

ALTER TABLE ONLY public.reservation_attempts
    ADD CONSTRAINT reservation_attempts_reservation_id_fkey FOREIGN KEY (reservation_id) REFERENCES public.reservations(reservation_id) ON DELETE CASCADE;

ALTER TABLE ONLY public.reservations
    ADD CONSTRAINT reservations_account_fkey FOREIGN KEY (account) REFERENCES public.quotas(account) ON DELETE RESTRICT;
