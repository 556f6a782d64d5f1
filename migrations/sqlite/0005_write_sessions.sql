-- Write sessions: content a caller streams in raw chunks, written once it is complete.
-- Chunks are rows of their own (write_session_chunks), not one growing blob: appending a chunk
-- is then an INSERT of that chunk alone, where `content = content || ?` would rewrite the whole
-- value on every append, quadratic in the session's size.
-- Same representation as 0001 (BLOB uuids, INTEGER micros, TEXT JSON).
CREATE TABLE write_sessions (
    id                BLOB    NOT NULL PRIMARY KEY,
    caller            TEXT,
    target_file       TEXT    NOT NULL,
    operation         TEXT    NOT NULL,
    intent            TEXT,
    create_dirs       INTEGER NOT NULL,
    state             TEXT    NOT NULL,
    bytes_received    INTEGER NOT NULL,
    chunks            INTEGER NOT NULL,
    -- The content's last bytes, so a DONE line split across chunks is seen without reading back.
    tail              BLOB    NOT NULL,
    correction_rounds INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    finished_at       INTEGER,
    receipt           TEXT,
    error             TEXT
) STRICT;
CREATE INDEX write_sessions_open_idx ON write_sessions (updated_at)
    WHERE state IN ('awaiting_content', 'needs_corrections');
CREATE INDEX write_sessions_open_caller_idx ON write_sessions (caller, updated_at)
    WHERE state IN ('awaiting_content', 'needs_corrections');

CREATE TABLE write_session_chunks (
    session_id BLOB    NOT NULL,
    seq        INTEGER NOT NULL,
    content    BLOB    NOT NULL,
    PRIMARY KEY (session_id, seq)
) STRICT;
