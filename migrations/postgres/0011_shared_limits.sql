-- Per-key limits held where every replica sees them, so that a key allowed N batches at once
-- cannot run N on each of several replicas, and its request rate is one bucket, not one per
-- replica. SQLite serves one process, which keeps its limits in memory.

-- One token bucket per API key: `tokens` as of `at`, refilled by the statement that takes one.
CREATE TABLE rate_buckets (
    caller TEXT             NOT NULL PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    at     TIMESTAMPTZ      NOT NULL
);

-- One row per batch a key runs, held by a replica (`holder`) that renews `until` while it runs;
-- a dead replica's slots lapse with it.
CREATE TABLE batch_slots (
    id     UUID        NOT NULL PRIMARY KEY,
    caller TEXT        NOT NULL,
    holder TEXT        NOT NULL,
    until  TIMESTAMPTZ NOT NULL
);
CREATE INDEX batch_slots_caller_idx ON batch_slots (caller, until);
CREATE INDEX batch_slots_holder_idx ON batch_slots (holder);

-- Takes one of `p_caller`'s `p_max` slots, or refuses (false). The key's advisory lock makes the
-- count and the insert one step across replicas: two replicas admitting the key's last slot at
-- once cannot both see it free. Lapsed slots are dropped on the way.
CREATE FUNCTION writ_take_batch_slot(
    p_id UUID, p_caller TEXT, p_holder TEXT, p_max BIGINT, p_until TIMESTAMPTZ
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('writ:batches:' || p_caller, 0));
    DELETE FROM batch_slots WHERE caller = p_caller AND until <= now();
    IF (SELECT count(*) FROM batch_slots WHERE caller = p_caller) >= p_max THEN
        RETURN false;
    END IF;
    INSERT INTO batch_slots (id, caller, holder, until) VALUES (p_id, p_caller, p_holder, p_until);
    RETURN true;
END
$$;
