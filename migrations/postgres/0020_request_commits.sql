-- The git commit a request's files went into, for requests that were committed: the undo of a
-- committed request is a revert commit, whatever made the request commit (its own option, the
-- workspace's setting or the server's). One row per committed request, written after the commit.
CREATE TABLE request_commits (
    request_id   UUID        PRIMARY KEY,
    commit_id    TEXT        NOT NULL,
    committed_at TIMESTAMPTZ NOT NULL
);
