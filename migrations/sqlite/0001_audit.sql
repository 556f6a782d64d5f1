-- The audit log (SQLite). Append-only: change the schema with a new numbered file, never by
-- editing this one (sqlx refuses to start against a database whose applied checksum differs).
--
-- Representation choices, shared by every table:
-- - UUIDs are 16-byte BLOBs (what sqlx binds a `Uuid` as).
-- - Timestamps are INTEGER microseconds since the Unix epoch, so numeric order is time order
--   and since/until comparisons are exact; PostgreSQL's TIMESTAMPTZ has the same precision.
-- - JSON is TEXT written by serde_json.
-- STRICT makes SQLite reject a value of the wrong type instead of silently storing it.

-- One row per mutating call (batch or direct write).
CREATE TABLE requests (
    id              BLOB    NOT NULL PRIMARY KEY,
    received_at     INTEGER NOT NULL,
    route           TEXT    NOT NULL,
    -- API key id, never the key.
    caller          TEXT,
    idempotency_key TEXT,
    body_sha256     TEXT,
    status          TEXT    NOT NULL,
    finished_at     INTEGER,
    duration_ms     INTEGER,
    -- The body returned to the caller, replayed for a repeated idempotency key.
    response        TEXT
) STRICT;

-- COALESCE because NULL never equals NULL: without it, callers without auth could record the same
-- idempotency key twice. Lookups must use the same expression to hit this index.
CREATE UNIQUE INDEX requests_idempotency_key_idx
    ON requests (COALESCE(caller, ''), idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- One row per file touched. No foreign key to requests: writers always insert the request first,
-- but an audit row must never be lost because of the order two writers happened to commit in.
CREATE TABLE operations (
    -- Insertion order: the newest-first listing and its cursor walk this, not created_at, because
    -- clocks tie and step backwards while this does not. AUTOINCREMENT so a deleted seq is never
    -- reissued behind a cursor a client still holds.
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              BLOB    NOT NULL UNIQUE,
    request_id      BLOB    NOT NULL,
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    filename        TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    operation       TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    chosen_model    TEXT,
    selection       TEXT,
    arbiter_reason  TEXT,
    candidates      TEXT    NOT NULL DEFAULT '[]',
    previous_sha256 TEXT,
    sha256          TEXT,
    bytes           INTEGER,
    error           TEXT,
    duration_ms     INTEGER
) STRICT;

-- Each filtered newest-first listing walks one of these backwards and stops after a page.
CREATE INDEX operations_request_id_seq_idx   ON operations (request_id, seq);
CREATE INDEX operations_filename_seq_idx     ON operations (filename, seq);
CREATE INDEX operations_status_seq_idx       ON operations (status, seq);
CREATE INDEX operations_chosen_model_seq_idx ON operations (chosen_model, seq);
CREATE INDEX operations_created_at_idx       ON operations (created_at);
-- Reconciliation after a crash reads only the (few) pending rows.
CREATE INDEX operations_pending_idx ON operations (seq) WHERE status = 'pending';

-- Written content, kept apart so that listing operations never reads file bodies.
CREATE TABLE operation_contents (
    operation_id BLOB NOT NULL PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    content      BLOB NOT NULL
) STRICT;
