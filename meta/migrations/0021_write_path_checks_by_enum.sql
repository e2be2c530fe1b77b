-- The write path's CHECK constraints, without their lists read back on every
-- statement (docs/COST.md, "Where PostgreSQL's CPU per PUT goes", issue 35).
--
-- PostgreSQL rebuilds a table's CHECK constraints from their stored text in
-- every statement that writes the table. `op IN ('put', 'copy', ...)` is
-- stored as a text[] constant printed byte by byte, so reading it back costs
-- about 3.6 us a constraint a statement; a write runs six (the attempt's
-- insert and its update check op and state, the generation's and the
-- catalog's rows check origin), about 20 us of PostgreSQL's CPU a write. The
-- same rule as a cast to an enum of the allowed values stores no list: the
-- labels live in pg_enum, looked up through the system cache.
--
-- The columns stay text, so no table or index is rewritten and no reader
-- sees a new type. The new constraints are added NOT VALID: that skips the
-- scan of existing rows (all of generations' history) under this
-- migration's lock, and every existing row already passed the equivalent
-- constraint dropped here. New and updated rows are checked as before; a
-- value outside the list is refused with "invalid input value for enum"
-- instead of a check violation. A new value is added to the enum (ALTER
-- TYPE ... ADD VALUE) and to lease/vocab.go together.

CREATE TYPE fencegate_attempt_op AS ENUM ('put', 'copy', 'complete', 'delete', 'multipart');
CREATE TYPE fencegate_attempt_state AS ENUM ('leased', 'open', 'committed', 'adopted', 'unknown', 'failed', 'aborted');
CREATE TYPE fencegate_origin AS ENUM ('fencegate', 'adopted', 'external');

ALTER TABLE attempts
    DROP CONSTRAINT attempts_op_check,
    DROP CONSTRAINT attempts_state_check,
    ADD CONSTRAINT attempts_op_check CHECK (op::fencegate_attempt_op IS NOT NULL) NOT VALID,
    ADD CONSTRAINT attempts_state_check CHECK (state::fencegate_attempt_state IS NOT NULL) NOT VALID;
ALTER TABLE generations
    DROP CONSTRAINT generations_origin_check,
    ADD CONSTRAINT generations_origin_check CHECK (origin::fencegate_origin IS NOT NULL) NOT VALID;
ALTER TABLE catalog
    DROP CONSTRAINT catalog_origin_check,
    ADD CONSTRAINT catalog_origin_check CHECK (origin::fencegate_origin IS NOT NULL) NOT VALID;
