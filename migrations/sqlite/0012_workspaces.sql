-- Named workspaces besides REPO_DIR (see migrations/postgres/0016_workspaces.sql). Timestamps
-- as in 0001: INTEGER microseconds since the Unix epoch.
CREATE TABLE workspaces (
    name       TEXT    NOT NULL PRIMARY KEY,
    kind       TEXT    NOT NULL,
    root       TEXT    NOT NULL,
    source     TEXT,
    branch     TEXT,
    base_ref   TEXT,
    created_at INTEGER NOT NULL,
    created_by TEXT
) STRICT;

-- The workspaces a key may use: names, comma-separated (a name never holds a comma). NULL: every
-- workspace, what keys issued before workspaces existed keep.
ALTER TABLE api_keys ADD COLUMN workspaces TEXT;
