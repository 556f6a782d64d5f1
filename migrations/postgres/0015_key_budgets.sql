-- What each API key may spend per UTC day and per UTC month, in cost (millionths of the
-- provider's currency, so that limits compare exactly) and in tokens. No row: no budget. Spend
-- itself is not kept here: it is summed from the operations' candidates, which every replica
-- records in this database, so the limit holds across replicas without a counter to keep right.
CREATE TABLE key_budgets (
    key_id              TEXT        NOT NULL PRIMARY KEY,
    daily_cost_micros   BIGINT,
    daily_tokens        BIGINT,
    monthly_cost_micros BIGINT,
    monthly_tokens      BIGINT,
    updated_at          TIMESTAMPTZ NOT NULL
);

-- A key's spend in a window reads the operations of its requests received since it began.
CREATE INDEX requests_caller_received_at_idx ON requests (caller, received_at);
