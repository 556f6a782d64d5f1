-- Whether a request in the workspace that does not say commits what it wrote (see
-- migrations/postgres/0019_workspace_git_commit.sql). 0 or 1; NULL: as the server is set.
ALTER TABLE workspaces ADD COLUMN git_commit INTEGER CHECK (git_commit IN (0, 1));

-- A write session's own `commit` (see the PostgreSQL migration).
ALTER TABLE write_sessions ADD COLUMN git_commit INTEGER CHECK (git_commit IN (0, 1));
