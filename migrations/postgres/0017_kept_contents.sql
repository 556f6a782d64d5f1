-- What a file held before writ replaced it, kept by content (its SHA-256) so that an update can
-- be undone byte for byte even when writ did not write the file's earlier version. Keyed by hash:
-- a state a file returns to, or that several files share, is kept once. `kept_at` is refreshed
-- whenever the same content is kept again; the history prune removes rows older than the
-- retention.
CREATE TABLE kept_contents (
    sha256  TEXT        PRIMARY KEY,
    kept_at TIMESTAMPTZ NOT NULL,
    content BYTEA       NOT NULL
);
CREATE INDEX kept_contents_kept_at_idx ON kept_contents (kept_at);
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        BEGIN
            ALTER TABLE kept_contents ALTER COLUMN content SET COMPRESSION lz4;
        EXCEPTION WHEN feature_not_supported THEN
            RAISE NOTICE 'this PostgreSQL has no lz4: kept contents keep the default compression';
        END;
    END IF;
END
$$;
