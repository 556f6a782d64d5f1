-- Claims: advisory leases a workspace takes on paths of its repository (see
-- migrations/postgres/0027_workspace_claims.sql). Same representation as 0001 (BLOB uuids,
-- INTEGER micros, TEXT JSON).
CREATE TABLE workspace_claims (
    id         BLOB    NOT NULL PRIMARY KEY,
    repository TEXT    NOT NULL,
    workspace  TEXT    NOT NULL,
    paths      TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    created_by TEXT
) STRICT;
CREATE INDEX workspace_claims_repository_expires_idx ON workspace_claims (repository, expires_at);
CREATE INDEX workspace_claims_workspace_idx ON workspace_claims (workspace);
