-- A key's batch slot lasts as long as the batch's job, whichever replica runs it. A slot is
-- named by its batch's id (the job's), and:
-- - a slot whose job is unfinished never lapses, even once its replica stopped renewing it (the
--   replica died, or handed the job back): the job will run again, so it still counts;
-- - when a replica claims the job (`owner` changes), the slot becomes that replica's, which
--   renews it from then on;
-- - when the job ends (`done` or `failed`, on whatever path), the slot is given back in the same
--   statement, so once and only once.
-- A slot with no job (the batch was refused or replayed before its job was recorded) lapses with
-- its replica, as before.

-- The slot's id already held: the same batch admitted again (a retry carrying its request id),
-- counted once.
CREATE OR REPLACE FUNCTION writ_take_batch_slot(
    p_id UUID, p_caller TEXT, p_holder TEXT, p_max BIGINT, p_until TIMESTAMPTZ
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('writ:batches:' || p_caller, 0));
    IF EXISTS (SELECT 1 FROM batch_slots WHERE id = p_id) THEN
        RETURN true;
    END IF;
    DELETE FROM batch_slots s
     WHERE s.caller = p_caller AND s.until <= now()
       AND NOT EXISTS (SELECT 1 FROM jobs j
                        WHERE j.id = s.id AND j.status IN ('queued', 'running'));
    IF (SELECT count(*) FROM batch_slots WHERE caller = p_caller) >= p_max THEN
        RETURN false;
    END IF;
    INSERT INTO batch_slots (id, caller, holder, until) VALUES (p_id, p_caller, p_holder, p_until);
    RETURN true;
END
$$;

CREATE FUNCTION writ_batch_slot_follows_job() RETURNS TRIGGER LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status NOT IN ('queued', 'running') THEN
        DELETE FROM batch_slots WHERE id = NEW.id;
    ELSIF NEW.owner IS DISTINCT FROM OLD.owner AND NEW.owner IS NOT NULL THEN
        UPDATE batch_slots SET holder = NEW.owner, until = COALESCE(NEW.lease_until, until)
         WHERE id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

-- Fires only for statements that set `status` or `owner` (the end, a claim), not for the lease
-- renewals every few seconds.
CREATE TRIGGER jobs_batch_slot
    AFTER UPDATE OF status, owner ON jobs
    FOR EACH ROW EXECUTE FUNCTION writ_batch_slot_follows_job();
