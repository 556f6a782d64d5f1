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
