-- Jobs: every write_codebase batch as a row that outlives the process, and its progress events.
-- The job id is the request id. Same representation as 0001 (BLOB uuids, INTEGER micros, TEXT JSON).
CREATE TABLE jobs (
    id           BLOB    NOT NULL PRIMARY KEY,
    status       TEXT    NOT NULL,
    is_async     INTEGER NOT NULL,
    files        TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    -- Refreshed by the process running the job; a stale heartbeat means that process is gone.
    heartbeat_at INTEGER NOT NULL,
    finished_at  INTEGER,
    batch_status TEXT,
    response     TEXT,
    error        TEXT
) STRICT;
CREATE INDEX jobs_created_at_idx ON jobs (created_at DESC);
CREATE INDEX jobs_unfinished_idx ON jobs (heartbeat_at) WHERE status IN ('queued', 'running');

CREATE TABLE job_events (
    job_id     BLOB    NOT NULL,
    seq        INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    data       TEXT    NOT NULL,
    PRIMARY KEY (job_id, seq)
) STRICT;
