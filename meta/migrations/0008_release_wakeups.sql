-- Cross-gateway wake-ups (docs/DESIGN.md, "Concurrent writers"). A writer
-- that finds its key held by a live holder and is going to wait marks the
-- key's lease row with its gateway (wakeup; '*' once writers of several
-- gateways wait). The update that frees a marked row (fencegate_commit's
-- release, Catalog.Release, a settler's release: whatever sets holder NULL)
-- sends NOTIFY fencegate_lease_released, payload the key's hash, inside the
-- releasing transaction, and clears the mark. Each gateway LISTENs on one
-- dedicated connection and wakes its waiter for that key at once instead of
-- at its next poll.
--
-- Why only marked rows: a NOTIFY makes its transaction take a database-wide
-- lock from before its commit record until its end, so notifying commits
-- serialize, WAL flush included. Measured here (pgbench, fsync on, one idle
-- listener, a one-row UPDATE per transaction, 32 clients on two cores):
-- 3,900-7,100 transactions/s without a NOTIFY, 700-1,400/s with one in every
-- transaction, 2,600-4,000/s with one in every tenth; at one client no
-- measurable difference. The mark check costs nothing measurable
-- (4,900-5,500/s beside 3,900-5,700/s). So only releases that someone in
-- another gateway waits for pay it; a gateway's own waiters are handed the
-- key in-process, and a row marked by them alone sends nothing.
--
-- Why inside the releasing transaction: a waiter's mark is committed by the
-- same statement that found the key held (fencegate_acquire, under the row
-- lock), so either the release came first and the acquire took the key, or
-- the release sees the mark and its notification is delivered to every
-- listener subscribed before the release committed. No wake-up is lost to a
-- crash between a commit and a separate notifying transaction.

ALTER TABLE leases ADD COLUMN wakeup text;

-- fencegate_key_hash is a release notification's payload: the first 16 hex
-- digits of the SHA-256 of bucket/key in UTF-8 (meta.KeyHash computes the
-- same). SHA-256, not md5: md5() fails on servers in FIPS mode.
CREATE FUNCTION fencegate_key_hash(p_bucket text, p_key text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT left(encode(sha256(convert_to(p_bucket || '/' || p_key, 'UTF8')), 'hex'), 16)
$$;

-- Called for a marked row being freed: notify unless the only gateway
-- waiting is the releasing holder's own (its waiters are handed the key
-- in-process). A settler's lease has no attempt row: it always notifies.
CREATE FUNCTION fencegate_lease_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.wakeup = '*' OR NOT EXISTS (SELECT 1 FROM attempts WHERE attempt_id = OLD.holder AND gateway = OLD.wakeup) THEN
        PERFORM pg_notify('fencegate_lease_released', fencegate_key_hash(OLD.bucket, OLD.key));
    END IF;
    NEW.wakeup := NULL;
    RETURN NEW;
END $$;

CREATE TRIGGER leases_released BEFORE UPDATE ON leases FOR EACH ROW
    WHEN (OLD.wakeup IS NOT NULL AND OLD.holder IS NOT NULL AND NEW.holder IS NULL)
    EXECUTE FUNCTION fencegate_lease_released();

DROP FUNCTION fencegate_acquire(text, text, uuid, interval, text, text, text, bigint, text, uuid, uuid);

-- fencegate_acquire is 0006's, plus p_wait: a writer that will wait if the
-- key is held marks the row with its gateway p_gateway (above). It defaults
-- to false, so a gateway built before this migration calls it unchanged (its
-- waiters poll, as they did). A refusal also says, in holder_live_for, how
-- many seconds the live holder stays live at most unless it renews its lease
-- or its session heartbeats (whichever expiry comes first), so a waiter that
-- polls slowly still tries again as soon as a holder that died is gone. A
-- writer that loses the race to insert a new key's row reads the row its
-- rival committed, like any held key.
CREATE FUNCTION fencegate_acquire(p_bucket text, p_key text, p_holder uuid, p_ttl interval, p_mode text,
        p_op text, p_gateway text, p_size bigint, p_checksum text, p_upload_attempt uuid, p_session uuid,
        p_wait boolean DEFAULT false,
        OUT acquired boolean, OUT dead_session_for double precision, OUT holder_live_for double precision)
    LANGUAGE plpgsql AS $$
DECLARE
    v_holder  uuid;
    v_expires timestamptz;
    v_session uuid;
    v_wakeup  text;
    v_mark    text;
    v_found   boolean := false; -- the key's row was there (locked)
    v_new     boolean := false; -- this call inserted it, leased to p_holder
BEGIN
    acquired := false;
    FOR i IN 1..2 LOOP
        SELECT holder, expires_at, session, wakeup INTO v_holder, v_expires, v_session, v_wakeup
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
    ELSIF fencegate_lease_live(v_holder, v_expires, v_session) THEN
        holder_live_for := extract(epoch FROM least(v_expires,
            (SELECT s.expires_at FROM sessions s WHERE s.session_id = v_session)) - clock_timestamp());
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
        UPDATE leases SET holder = p_holder, expires_at = clock_timestamp() + p_ttl, progress_at = NULL, session = p_session
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
    acquired := true;
END $$;
