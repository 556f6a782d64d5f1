-- API keys. Only the SHA-256 of a key's secret is kept, never the key; `id` is the
-- public part that the audit log's requests.caller records.
CREATE TABLE api_keys (
    id            TEXT        PRIMARY KEY,
    name          TEXT        NOT NULL,
    secret_sha256 TEXT        NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    -- Set once revoked; a revoked key is refused but kept, so old audit rows still name it.
    revoked_at    TIMESTAMPTZ
);
