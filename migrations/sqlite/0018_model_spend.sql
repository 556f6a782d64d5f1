-- What the model calls spent, per key, workspace and UTC day (see
-- migrations/postgres/0023_model_spend.sql): a call adds itself when it is made and again when it
-- ends. `caller` is '' with auth off; `day` is the day's first instant in microseconds (UTC).
CREATE TABLE model_spend (
    caller    TEXT    NOT NULL,
    workspace TEXT    NOT NULL,
    day       INTEGER NOT NULL,
    calls     INTEGER NOT NULL DEFAULT 0,
    tokens    INTEGER NOT NULL DEFAULT 0,
    cost      REAL    NOT NULL DEFAULT 0,
    PRIMARY KEY (caller, workspace, day)
) STRICT;

CREATE INDEX model_spend_workspace_day_idx ON model_spend (workspace, day);
