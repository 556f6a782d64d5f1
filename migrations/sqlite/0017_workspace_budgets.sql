-- What each workspace may spend per UTC day and per UTC month (see
-- migrations/postgres/0021_workspace_budgets.sql): cost in millionths of the provider's currency,
-- and tokens. No row: no budget. Spend is summed from the operations of the workspace's requests.
CREATE TABLE workspace_budgets (
    workspace           TEXT    NOT NULL PRIMARY KEY,
    daily_cost_micros   INTEGER,
    daily_tokens        INTEGER,
    monthly_cost_micros INTEGER,
    monthly_tokens      INTEGER,
    updated_at          INTEGER NOT NULL
) STRICT;

CREATE INDEX requests_workspace_received_at_idx ON requests (workspace, received_at);
