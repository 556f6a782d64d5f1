-- The caller of each operation's request, on the operation itself: "this caller's newest
-- operations" (the prompts' recent context, and GET /operations for a key) walks one index
-- backwards and stops after a page, instead of joining every request the caller ever made.
-- Filled by the insert from the request row, which is always committed first. '' is "no key"
-- (not NULL), as on PostgreSQL, where an equality lets the planner read the index in order.
ALTER TABLE operations ADD COLUMN caller TEXT NOT NULL DEFAULT '';

UPDATE operations
   SET caller = COALESCE((SELECT caller FROM requests WHERE requests.id = operations.request_id), '');

CREATE INDEX operations_caller_seq_idx ON operations (caller, seq);
