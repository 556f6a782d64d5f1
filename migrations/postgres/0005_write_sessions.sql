-- Write sessions: content a caller streams in raw chunks, written once it is complete.
-- Chunks are rows of their own (write_session_chunks), not one growing bytea: appending a chunk
-- is then an INSERT of that chunk alone, where `content = content || $chunk` would rewrite the
-- whole (TOASTed) value on every append, quadratic in the session's size.
CREATE TABLE write_sessions (
    id                UUID        NOT NULL PRIMARY KEY,
    caller            TEXT,
    target_file       TEXT        NOT NULL,
    operation         TEXT        NOT NULL,
    intent            TEXT,
    create_dirs       BOOLEAN     NOT NULL,
    state             TEXT        NOT NULL,
    bytes_received    BIGINT      NOT NULL,
    chunks            BIGINT      NOT NULL,
    -- The content's last bytes, so a DONE line split across chunks is seen without reading back.
    tail              BYTEA       NOT NULL,
    correction_rounds BIGINT      NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL,
    finished_at       TIMESTAMPTZ,
    receipt           JSONB,
    error             TEXT
);
-- The expiry sweep and the open-session bound read only open sessions.
CREATE INDEX write_sessions_open_idx ON write_sessions (updated_at)
    WHERE state IN ('awaiting_content', 'needs_corrections');
CREATE INDEX write_sessions_open_caller_idx ON write_sessions (caller, updated_at)
    WHERE state IN ('awaiting_content', 'needs_corrections');

CREATE TABLE write_session_chunks (
    session_id UUID   NOT NULL,
    seq        BIGINT NOT NULL,
    content    BYTEA  NOT NULL,
    PRIMARY KEY (session_id, seq)
);
