-- A workspace's batch slots (WRIT_MAX_BATCHES_PER_WORKSPACE, held under the caller
-- `workspace:<name>`) follow their batch's job as a key's do (0012). A key's slot is named by the
-- job's id; a workspace's slot for the same batch needs an id of its own (a slot is one row), so
-- every slot now records its job in `job` (a key's: its own id), and what 0012 did by `id` is
-- done by `job`: a slot of an unfinished job never lapses, passes to the replica that claims the
-- job, and is given back when the job ends.
ALTER TABLE batch_slots ADD COLUMN job UUID;
UPDATE batch_slots SET job = id;
ALTER TABLE batch_slots ALTER COLUMN job SET NOT NULL;
CREATE INDEX batch_slots_job_idx ON batch_slots (job);

CREATE FUNCTION writ_take_batch_slot(
    p_id UUID, p_job UUID, p_caller TEXT, p_holder TEXT, p_max BIGINT, p_until TIMESTAMPTZ
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('writ:batches:' || p_caller, 0));
    IF EXISTS (SELECT 1 FROM batch_slots WHERE id = p_id) THEN
        RETURN true;
    END IF;
    DELETE FROM batch_slots s
     WHERE s.caller = p_caller AND s.until <= now()
       AND NOT EXISTS (SELECT 1 FROM jobs j
                        WHERE j.id = s.job AND j.status IN ('queued', 'running'));
    IF (SELECT count(*) FROM batch_slots WHERE caller = p_caller) >= p_max THEN
        RETURN false;
    END IF;
    INSERT INTO batch_slots (id, job, caller, holder, until)
    VALUES (p_id, p_job, p_caller, p_holder, p_until);
    RETURN true;
END
$$;

-- What a replica running the code of 0012 calls during a rolling upgrade: a key's slot.
CREATE OR REPLACE FUNCTION writ_take_batch_slot(
    p_id UUID, p_caller TEXT, p_holder TEXT, p_max BIGINT, p_until TIMESTAMPTZ
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
BEGIN
    RETURN writ_take_batch_slot(p_id, p_id, p_caller, p_holder, p_max, p_until);
END
$$;

CREATE OR REPLACE FUNCTION writ_batch_slot_follows_job() RETURNS TRIGGER LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status NOT IN ('queued', 'running') THEN
        DELETE FROM batch_slots WHERE job = NEW.id;
    ELSIF NEW.owner IS DISTINCT FROM OLD.owner AND NEW.owner IS NOT NULL THEN
        UPDATE batch_slots SET holder = NEW.owner, until = COALESCE(NEW.lease_until, until)
         WHERE job = NEW.id;
    END IF;
    RETURN NULL;
END
$$;
