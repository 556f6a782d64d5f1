-- Jobs: every write_codebase batch as a row that outlives the process, and its progress events.
-- The job id is the request id.
CREATE TABLE jobs (
    id           UUID        NOT NULL PRIMARY KEY,
    status       TEXT        NOT NULL,
    is_async     BOOLEAN     NOT NULL,
    files        JSONB       NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    -- Refreshed by the replica running the job; a stale heartbeat means that replica is gone.
    heartbeat_at TIMESTAMPTZ NOT NULL,
    finished_at  TIMESTAMPTZ,
    batch_status TEXT,
    response     JSONB,
    error        TEXT
);
CREATE INDEX jobs_created_at_idx ON jobs (created_at DESC);
-- The stale-job sweep reads only unfinished jobs.
CREATE INDEX jobs_unfinished_idx ON jobs (heartbeat_at) WHERE status IN ('queued', 'running');

CREATE TABLE job_events (
    job_id     UUID        NOT NULL,
    seq        BIGINT      NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    name       TEXT        NOT NULL,
    data       JSONB       NOT NULL,
    PRIMARY KEY (job_id, seq)
);
