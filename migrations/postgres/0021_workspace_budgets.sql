-- What each workspace may spend per UTC day and per UTC month, beside its keys' budgets (see
-- 0015_key_budgets.sql): cost in millionths of the provider's currency, and tokens. No row: no
-- budget. `workspace` is a name, not a reference: `default` (REPO_DIR) is never a row of
-- `workspaces` but may carry a budget; deleting a workspace deletes its budget with it. Spend is
-- summed from the operations of the requests recorded in the workspace (0018), which every replica
-- writes here, so the limit holds across replicas.
CREATE TABLE workspace_budgets (
    workspace           TEXT        NOT NULL PRIMARY KEY,
    daily_cost_micros   BIGINT,
    daily_tokens        BIGINT,
    monthly_cost_micros BIGINT,
    monthly_tokens      BIGINT,
    updated_at          TIMESTAMPTZ NOT NULL
);

-- A workspace's spend in a window reads the operations of its requests received since it began.
CREATE INDEX requests_workspace_received_at_idx ON requests (workspace, received_at);
