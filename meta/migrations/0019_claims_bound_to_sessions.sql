-- A reconciler's claim on a work item lasts its claim period (2 x the lease
-- TTL) or until the claiming gateway's session ends, whichever comes first
-- (docs/DESIGN.md, "The reconciler"). Before, a gateway killed while it held
-- a claim (an unresolved key, an upload, an audit cursor, an ended
-- reservation) kept the item from every other gateway for the whole period,
-- though its key leases were free after the session timeout.
--
-- claim_session names the session of the gateway that claimed the item; a
-- back-off after a failed try, or a rest between audit pages, leaves it NULL:
-- a wait, which binds nobody. Adding a nullable column without a default
-- rewrites no table.

ALTER TABLE attempts ADD COLUMN claim_session uuid;
ALTER TABLE audit_cursors ADD COLUMN claim_session uuid;
ALTER TABLE reservations ADD COLUMN claim_session uuid;
