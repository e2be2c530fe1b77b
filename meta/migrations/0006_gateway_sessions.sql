-- PLACEHOLDER on branch `reconciler` only. Step 6 belongs to the gateway
-- sessions work (branch of /work/wt-sessions, file of this same name); tern
-- refuses a gap, so this empty step lets 0007_lifecycle.sql run here. When the
-- branches merge, take the sessions branch's version of this file. A database
-- migrated from this branch (tests and `make run` create fresh ones) must be
-- recreated, since it would record step 6 as applied.
SELECT 1;
