-- What the model calls spent, per key, workspace and UTC day: each call adds itself to its row
-- when it is made (the call, and its prompt tokens as estimated) and again when it ends (the
-- provider's token counts in place of the estimate, and the cost), so a call counts whatever
-- becomes of its batch — a dry run, a failure, a cancellation, a file never written. Budgets read
-- their windows here. `caller` is '' for batches made with auth off; `day` is the day's first
-- instant (UTC); `tokens` is a running sum of additions, some of them corrections below zero.
CREATE TABLE model_spend (
    caller    TEXT             NOT NULL,
    workspace TEXT             NOT NULL,
    day       TIMESTAMPTZ      NOT NULL,
    calls     BIGINT           NOT NULL DEFAULT 0,
    tokens    BIGINT           NOT NULL DEFAULT 0,
    cost      DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (caller, workspace, day)
);

-- A workspace's windows, whoever's key spent (a key's read the primary key).
CREATE INDEX model_spend_workspace_day_idx ON model_spend (workspace, day);
