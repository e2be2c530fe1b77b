-- fencegate_commit_hand_over: a holder's commit that hands the key's lease,
-- in the same transaction, to the next writer of the same gateway waiting
-- for it (lease/handover.go). The waiter's attempt is recorded and leased
-- as fencegate_acquire would, so a hot key's writers need one round trip
-- per write instead of a commit and then an acquire.
--
-- Fairness: if a writer of another gateway waits (the row is marked with
-- another gateway or '*', see 0008), the lease is released as by
-- fencegate_commit alone, which notifies that gateway, and acquired is
-- false: the local waiter asks again like any other. So a gateway's own
-- queue cannot keep a key from the others for more than one write.
CREATE FUNCTION fencegate_commit_hand_over(p_bucket text, p_key text, p_holder uuid, p_settled uuid, p_settled_state text,
        p_etag text, p_size bigint, p_attempt uuid, p_deleted boolean, p_origin text,
        p_next uuid, p_ttl interval, p_op text, p_gateway text, p_next_size bigint, p_checksum text,
        p_upload_attempt uuid, p_session uuid,
        OUT generation bigint, OUT acquired boolean)
    LANGUAGE plpgsql AS $$
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
