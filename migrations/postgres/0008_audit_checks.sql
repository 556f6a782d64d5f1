-- writ_expect(ok, message): true, or an error (SQLSTATE P0002) carrying `message`. Lets one
-- statement that writes several audit records (a batch's file completions, its request's
-- closing and its job's) check that each record it updates exists, and refuse itself, changing
-- nothing, before it commits: the check costs no round trip of its own.
CREATE OR REPLACE FUNCTION writ_expect(ok boolean, message text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ok THEN
        RAISE EXCEPTION USING MESSAGE = message, ERRCODE = 'P0002';
    END IF;
    RETURN true;
END
$$;
