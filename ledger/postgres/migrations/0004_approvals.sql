-- 0004: the approval gate. A row whose claim needed a human carries an
-- approval (in doc); these columns are copies of what the indexes need,
-- written by the same UPDATE as the document:
--   approval_id          the approval's id, for POST /v1/approvals/{id}/…
--   approval_expires_at  set only while the approval is open (requested, the
--                        row pending), so the partial indexes hold exactly
--                        the open approvals and the expiry job walks only
--                        what is due.

ALTER TABLE rows ADD COLUMN approval_id text COLLATE "C";
ALTER TABLE rows ADD COLUMN approval_expires_at timestamptz;

ALTER TABLE rows ADD CONSTRAINT rows_approval_id_key UNIQUE (approval_id);
CREATE INDEX rows_approvals_due_idx ON rows (approval_expires_at, tenant, key) WHERE approval_expires_at IS NOT NULL;
CREATE INDEX rows_approvals_tenant_idx ON rows (tenant, approval_expires_at, key) WHERE approval_expires_at IS NOT NULL;
