-- The git commit a request's files went into (see the PostgreSQL migration).
CREATE TABLE request_commits (
    request_id   BLOB    NOT NULL PRIMARY KEY,
    commit_id    TEXT    NOT NULL,
    committed_at INTEGER NOT NULL
);
