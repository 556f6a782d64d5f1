-- The large values writ stores (a written file's content, a write session's chunks, a batch's
-- stored answer) are compressed by PostgreSQL once a row passes about 2 KB, inside the commit a
-- write or an answer waits for. The default method, pglz, costs about four times lz4's CPU for a
-- code file (about 55 µs against 15 µs for 7 KB; BENCHMARKS.md) and compresses it little better.
-- lz4 where the server has it: PostgreSQL 14 and later built with lz4, as the Debian and Docker
-- images are. Elsewhere the columns keep the server's default. Changes how new values are
-- stored only: nothing is rewritten, existing values stay readable.
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        BEGIN
            ALTER TABLE operation_contents ALTER COLUMN content SET COMPRESSION lz4;
            ALTER TABLE write_session_chunks ALTER COLUMN content SET COMPRESSION lz4;
            ALTER TABLE requests ALTER COLUMN response SET COMPRESSION lz4;
            ALTER TABLE jobs ALTER COLUMN response SET COMPRESSION lz4;
        EXCEPTION WHEN feature_not_supported THEN
            RAISE NOTICE 'this PostgreSQL has no lz4: large values keep the default compression';
        END;
    END IF;
END
$$;
