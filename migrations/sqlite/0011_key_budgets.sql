-- What each API key may spend per UTC day and per UTC month (see
-- migrations/postgres/0015_key_budgets.sql): cost in millionths of the provider's currency, and
-- tokens. No row: no budget. Spend is summed from the operations' candidates.
CREATE TABLE key_budgets (
    key_id              TEXT    NOT NULL PRIMARY KEY,
    daily_cost_micros   INTEGER,
    daily_tokens        INTEGER,
    monthly_cost_micros INTEGER,
    monthly_tokens      INTEGER,
    updated_at          INTEGER NOT NULL
);

CREATE INDEX requests_caller_received_at_idx ON requests (caller, received_at);
