-- 0010: two indexes every claim paid for and no query needed.
--
-- approval_id was a UNIQUE constraint, whose index holds an entry for every
-- row, NULL included, though only rows awaiting approval have one: a btree
-- insert on every claim and on every update that moves a row. A partial
-- unique index keeps the same rule (ON CONFLICT DO NOTHING without a target
-- honours it; "approval_id = $1" implies NOT NULL, so RowByApproval still
-- uses it) for the rows that have an approval.
--
-- commit_markers' btree on at was another insert per write transaction,
-- only for the prune. Markers are written in time order, so a BRIN index
-- (a summary per range of pages, updated only when a range's bounds move)
-- finds the old ones as well.
--
-- Both statements lock the table while the index builds: on a large rows
-- table, run this migration at a quiet moment.

CREATE UNIQUE INDEX rows_approval_id_set ON rows (approval_id) WHERE approval_id IS NOT NULL;
ALTER TABLE rows DROP CONSTRAINT rows_approval_id_key;
ALTER INDEX rows_approval_id_set RENAME TO rows_approval_id_key;

DROP INDEX commit_markers_at_idx;
CREATE INDEX commit_markers_at_brin ON commit_markers USING brin (at);
