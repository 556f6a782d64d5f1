-- Change sets held for review (see migrations/postgres/0025_change_sets.sql): one decision of each
-- number per set lands (the primary key of change_decisions), so two reviewers deciding on the
-- same version at once cannot both apply. Same representation as 0001 (BLOB uuids, INTEGER
-- micros, TEXT JSON).
CREATE TABLE change_sets (
    id         BLOB    NOT NULL PRIMARY KEY,
    request_id BLOB    NOT NULL,
    route      TEXT    NOT NULL,
    caller     TEXT,
    workspace  TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    summary    TEXT,
    git_commit INTEGER CHECK (git_commit IN (0, 1)),
    state      TEXT    NOT NULL,
    undecided  INTEGER NOT NULL,
    decisions  INTEGER NOT NULL
) STRICT;
CREATE INDEX change_sets_workspace_created_idx ON change_sets (workspace, created_at DESC);
CREATE INDEX change_sets_expires_idx ON change_sets (expires_at);

CREATE TABLE change_files (
    change_id    BLOB    NOT NULL,
    position     INTEGER NOT NULL,
    path         TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    base_sha256  TEXT,
    sha256       TEXT    NOT NULL,
    bytes        INTEGER NOT NULL,
    hunks        TEXT    NOT NULL,
    provenance   TEXT    NOT NULL,
    operation_id BLOB    NOT NULL,
    base         BLOB,
    content      BLOB    NOT NULL,
    PRIMARY KEY (change_id, position)
) STRICT;

CREATE TABLE change_decisions (
    change_id  BLOB    NOT NULL,
    seq        INTEGER NOT NULL,
    decided_at INTEGER NOT NULL,
    decision   TEXT    NOT NULL,
    PRIMARY KEY (change_id, seq)
) STRICT;

-- Whether a write session's content is proposed for review (NULL: as the server is set).
ALTER TABLE write_sessions ADD COLUMN review INTEGER CHECK (review IN (0, 1));
