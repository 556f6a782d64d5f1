-- Jobs owned by leases: the replica running a job names itself in `owner` and renews
-- `lease_until`; once a lease lapses (its replica was killed, or handed the job back when it
-- stopped) another replica claims the job (`FOR UPDATE SKIP LOCKED`) and resumes it from its
-- operations. `attempts` counts those claims, so a job that keeps failing to resume ends
-- `failed`. `request` is the batch as the caller sent it, which a resuming replica parses again.
-- Jobs recorded before this migration have no lease and are failed by the stale-heartbeat sweep.
ALTER TABLE jobs ADD COLUMN owner TEXT;
ALTER TABLE jobs ADD COLUMN lease_until TIMESTAMPTZ;
ALTER TABLE jobs ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN request TEXT;
-- The claim reads only unfinished jobs whose lease lapsed.
CREATE INDEX jobs_lease_idx ON jobs (lease_until) WHERE status IN ('queued', 'running');
