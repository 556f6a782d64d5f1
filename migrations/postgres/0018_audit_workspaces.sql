-- The workspace of every request, operation and job, so that the listings filter by it, a key
-- bound to some workspaces sees only their records, a replica resuming a job writes in the job's
-- workspace, and a restart reconciles a pending write in the workspace it was made in. Records
-- made before workspaces existed were all made in REPO_DIR, the workspace `default`. A constant
-- default: the columns are added without rewriting the tables.
ALTER TABLE requests ADD COLUMN workspace TEXT NOT NULL DEFAULT 'default';
ALTER TABLE operations ADD COLUMN workspace TEXT NOT NULL DEFAULT 'default';
ALTER TABLE jobs ADD COLUMN workspace TEXT NOT NULL DEFAULT 'default';
-- A write session writes its file in the workspace it was begun in.
ALTER TABLE write_sessions ADD COLUMN workspace TEXT NOT NULL DEFAULT 'default';

-- A workspace's newest operations, and its jobs newest first, walk one index each.
CREATE INDEX operations_workspace_seq_idx ON operations (workspace, seq);
CREATE INDEX jobs_workspace_created_idx ON jobs (workspace, created_at);
