-- The workspace of every request, operation and job (see
-- migrations/postgres/0018_audit_workspaces.sql): `default` for every record made before.
ALTER TABLE requests ADD COLUMN workspace TEXT NOT NULL DEFAULT 'default';
ALTER TABLE operations ADD COLUMN workspace TEXT NOT NULL DEFAULT 'default';
ALTER TABLE jobs ADD COLUMN workspace TEXT NOT NULL DEFAULT 'default';
-- A write session writes its file in the workspace it was begun in.
ALTER TABLE write_sessions ADD COLUMN workspace TEXT NOT NULL DEFAULT 'default';

CREATE INDEX operations_workspace_seq_idx ON operations (workspace, seq);
CREATE INDEX jobs_workspace_created_idx ON jobs (workspace, created_at);
