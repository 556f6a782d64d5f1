-- What a write replaced, kept with the operation that replaced it, so that any change writ made
-- can be taken back byte for byte (POST /requests/{id}/undo) — also over a version writ never
-- wrote itself (a file the user had before writ changed it). Apart from operation_contents so
-- that a listing, or a read of what was written, never drags it along; lz4 like the contents
-- where the server has it (see 0009).
CREATE TABLE operation_previous_contents (
    operation_id UUID  PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    content      BYTEA NOT NULL
);

DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        BEGIN
            ALTER TABLE operation_previous_contents ALTER COLUMN content SET COMPRESSION lz4;
        EXCEPTION WHEN feature_not_supported THEN
            RAISE NOTICE 'this PostgreSQL has no lz4: previous contents keep the default compression';
        END;
    END IF;
END
$$;
