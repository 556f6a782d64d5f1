-- Change sets: content writ chose but did not write, held for a person or an agent to review per
-- file and per hunk (`options.review`, WRIT_REVIEW). A set's files keep what they held when the
-- change was made (`base`, NULL: the file did not exist) and what is proposed, with the change as
-- hunks (JSON, each with its stable id) and why the content was chosen (`provenance`).
--
-- A set's decisions (applies and rejections) are rows numbered per set: the primary key lets one
-- decision of each number land, so of two reviewers deciding on the same version at once, one
-- commits (in the transaction of the pending records of the files it writes) and the other is
-- refused with nothing written. `state`, `undecided` and `decisions` repeat what the decisions
-- give, so that open change sets are listed without reading them.
CREATE TABLE change_sets (
    id         UUID        NOT NULL PRIMARY KEY,
    request_id UUID        NOT NULL,
    route      TEXT        NOT NULL,
    caller     TEXT,
    workspace  TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    summary    TEXT,
    git_commit BOOLEAN,
    state      TEXT        NOT NULL,
    undecided  BIGINT      NOT NULL,
    decisions  BIGINT      NOT NULL
);
CREATE INDEX change_sets_workspace_created_idx ON change_sets (workspace, created_at DESC);
CREATE INDEX change_sets_expires_idx ON change_sets (expires_at);

CREATE TABLE change_files (
    change_id    UUID   NOT NULL,
    position     BIGINT NOT NULL,
    path         TEXT   NOT NULL,
    kind         TEXT   NOT NULL,
    base_sha256  TEXT,
    sha256       TEXT   NOT NULL,
    bytes        BIGINT NOT NULL,
    hunks        JSONB  NOT NULL,
    provenance   JSONB  NOT NULL,
    operation_id UUID   NOT NULL,
    base         BYTEA,
    content      BYTEA  NOT NULL,
    PRIMARY KEY (change_id, position)
);

CREATE TABLE change_decisions (
    change_id  UUID        NOT NULL,
    seq        BIGINT      NOT NULL,
    decided_at TIMESTAMPTZ NOT NULL,
    decision   JSONB       NOT NULL,
    PRIMARY KEY (change_id, seq)
);

-- Whether a write session's content is proposed for review instead of written (NULL: as the
-- server is set, WRIT_REVIEW).
ALTER TABLE write_sessions ADD COLUMN review BOOLEAN;

-- The contents as 0009 compresses the other large values: lz4 where the server has it.
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        BEGIN
            ALTER TABLE change_files ALTER COLUMN base SET COMPRESSION lz4;
            ALTER TABLE change_files ALTER COLUMN content SET COMPRESSION lz4;
        EXCEPTION WHEN feature_not_supported THEN
            RAISE NOTICE 'this PostgreSQL has no lz4: change sets keep the default compression';
        END;
    END IF;
END
$$;
