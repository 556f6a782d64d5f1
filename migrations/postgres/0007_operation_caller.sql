-- The caller of each operation's request, on the operation itself: "this caller's newest
-- operations" (the prompts' recent context, and GET /operations for a key) walks one index
-- backwards and stops after a page, instead of joining every request the caller ever made.
-- Filled by the insert from the request row, which is always committed first. '' is "no key"
-- (not NULL): an equality lets the planner read the index in `seq` order, `IS NULL` does not.
ALTER TABLE operations ADD COLUMN caller TEXT NOT NULL DEFAULT '';

UPDATE operations o SET caller = r.caller
  FROM requests r
 WHERE r.id = o.request_id AND r.caller IS NOT NULL;

CREATE INDEX operations_caller_seq_idx ON operations (caller, seq);
