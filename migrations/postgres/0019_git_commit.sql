-- Whether a request in the workspace that does not say (`options.commit`, `commit`) commits what
-- it wrote, where the workspace is a git repository. NULL: as the server is set (WRIT_GIT_COMMIT).
ALTER TABLE workspaces ADD COLUMN git_commit BOOLEAN;

-- A write session's own `commit` (what it began with): whether its write is committed; NULL: as
-- the workspace is set.
ALTER TABLE write_sessions ADD COLUMN git_commit BOOLEAN;
