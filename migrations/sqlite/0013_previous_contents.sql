-- What a write replaced, kept with the operation that replaced it, so that any change writ made
-- can be taken back byte for byte (see migrations/postgres/0017_previous_contents.sql).
CREATE TABLE operation_previous_contents (
    operation_id BLOB NOT NULL PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    content      BLOB NOT NULL
) STRICT;
