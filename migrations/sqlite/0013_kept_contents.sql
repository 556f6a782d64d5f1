-- What a file held before writ replaced it, kept by content (its SHA-256) so that an update can
-- be undone byte for byte even when writ did not write the file's earlier version. Keyed by hash:
-- a state a file returns to, or that several files share, is kept once. `kept_at` (microseconds
-- since the epoch) is refreshed whenever the same content is kept again; the history prune
-- removes rows older than the retention.
CREATE TABLE kept_contents (
    sha256  TEXT    NOT NULL PRIMARY KEY,
    kept_at INTEGER NOT NULL,
    content BLOB    NOT NULL
) STRICT;
CREATE INDEX kept_contents_kept_at_idx ON kept_contents (kept_at);
