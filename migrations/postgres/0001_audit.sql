-- The audit log (PostgreSQL). Append-only: change the schema with a new numbered file, never by
-- editing this one (sqlx refuses to start against a database whose applied checksum differs).

-- One row per mutating call (batch or direct write).
CREATE TABLE requests (
    id              UUID PRIMARY KEY,
    received_at     TIMESTAMPTZ NOT NULL,
    route           TEXT        NOT NULL,
    -- API key id, never the key.
    caller          TEXT,
    idempotency_key TEXT,
    body_sha256     TEXT,
    status          TEXT        NOT NULL,
    finished_at     TIMESTAMPTZ,
    duration_ms     BIGINT,
    -- The body returned to the caller, replayed for a repeated idempotency key.
    response        JSONB
);

-- COALESCE because NULL never equals NULL: without it, callers without auth could record the same
-- idempotency key twice. Lookups must use the same expression to hit this index.
CREATE UNIQUE INDEX requests_idempotency_key_idx
    ON requests ((COALESCE(caller, '')), idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- One row per file touched. No foreign key to requests: writers always insert the request first,
-- but an audit row must never be lost because of the order two writers happened to commit in.
CREATE TABLE operations (
    -- Insertion order: the newest-first listing and its cursor walk this, not created_at,
    -- because clocks tie and step backwards while a sequence does not.
    seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id              UUID        NOT NULL UNIQUE,
    request_id      UUID        NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    finished_at     TIMESTAMPTZ,
    filename        TEXT        NOT NULL,
    kind            TEXT        NOT NULL,
    operation       TEXT        NOT NULL,
    status          TEXT        NOT NULL,
    chosen_model    TEXT,
    selection       TEXT,
    arbiter_reason  TEXT,
    candidates      JSONB       NOT NULL DEFAULT '[]'::jsonb,
    previous_sha256 TEXT,
    sha256          TEXT,
    bytes           BIGINT,
    error           TEXT,
    duration_ms     BIGINT
);

-- Each filtered newest-first listing walks one of these backwards and stops after a page.
CREATE INDEX operations_request_id_seq_idx   ON operations (request_id, seq);
CREATE INDEX operations_filename_seq_idx     ON operations (filename, seq);
CREATE INDEX operations_status_seq_idx       ON operations (status, seq);
CREATE INDEX operations_chosen_model_seq_idx ON operations (chosen_model, seq);
CREATE INDEX operations_created_at_idx       ON operations (created_at);
-- Reconciliation after a crash reads only the (few) pending rows.
CREATE INDEX operations_pending_idx ON operations (seq) WHERE status = 'pending';

-- Written content, kept apart so that listing operations never drags file bodies through the heap.
CREATE TABLE operation_contents (
    operation_id UUID  PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    content      BYTEA NOT NULL
);
