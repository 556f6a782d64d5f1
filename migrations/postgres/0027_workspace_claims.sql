-- Claims: advisory leases a workspace takes on paths (globs, relative to the repository's root)
-- of its repository, seen by every workspace of the same repository and, being rows here, by
-- every replica. `repository` is the server's key for the holding workspace's repository (a git
-- worktree's repository path, else the workspace's own root); `workspace` is a name, not a
-- reference (`default` is never a row of `workspaces`), and deleting a workspace deletes its
-- claims. A claim past `expires_at` holds nothing: it is left out of every read and deleted when
-- its repository next takes a claim.
CREATE TABLE workspace_claims (
    id         UUID        NOT NULL PRIMARY KEY,
    repository TEXT        NOT NULL,
    workspace  TEXT        NOT NULL,
    paths      JSONB       NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    -- The id of the key that made it; NULL when auth is off.
    created_by TEXT
);
CREATE INDEX workspace_claims_repository_expires_idx ON workspace_claims (repository, expires_at);
CREATE INDEX workspace_claims_workspace_idx ON workspace_claims (workspace);
