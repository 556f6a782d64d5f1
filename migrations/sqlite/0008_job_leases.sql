-- The lease columns of PostgreSQL's jobs (see migrations/postgres/0010_job_leases.sql), so both
-- backends share one schema for jobs. SQLite serves one process: its jobs carry no lease, and an
-- unfinished job found at start-up is failed as interrupted.
ALTER TABLE jobs ADD COLUMN owner TEXT;
ALTER TABLE jobs ADD COLUMN lease_until INTEGER;
ALTER TABLE jobs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN request TEXT;
