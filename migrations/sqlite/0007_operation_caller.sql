-- The caller of each operation's request, on the operation itself: "this caller's newest
-- operations" (the prompts' recent context, and GET /operations for a key) walks one index
-- backwards and stops after a page, instead of joining every request the caller ever made.
-- Filled by the insert from the request row, which is always committed first.
ALTER TABLE operations ADD COLUMN caller TEXT;

UPDATE operations
   SET caller = (SELECT caller FROM requests WHERE requests.id = operations.request_id);

CREATE INDEX operations_caller_seq_idx ON operations (caller, seq);
