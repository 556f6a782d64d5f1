-- Named workspaces besides REPO_DIR (which is the workspace `default` and is never stored), so
-- that every replica serves the same set. `root` is the absolute path of the workspace's
-- directory; `source`, `branch` and `base_ref` say where it came from (a directory, or a git
-- repository and the branch made for it from `base_ref`).
CREATE TABLE workspaces (
    name       TEXT        PRIMARY KEY,
    kind       TEXT        NOT NULL,
    root       TEXT        NOT NULL,
    source     TEXT,
    branch     TEXT,
    base_ref   TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    -- The id of the key that created it; NULL when auth is off.
    created_by TEXT
);

-- The workspaces a key may use: names, comma-separated (a name never holds a comma). NULL: every
-- workspace, what keys issued before workspaces existed keep.
ALTER TABLE api_keys ADD COLUMN workspaces TEXT;
