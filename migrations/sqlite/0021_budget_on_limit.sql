-- What a budget does near its limits (see migrations/postgres/0026_budget_on_limit.sql).
ALTER TABLE key_budgets ADD COLUMN on_limit TEXT;
ALTER TABLE key_budgets ADD COLUMN degrade_at_permille INTEGER;
ALTER TABLE workspace_budgets ADD COLUMN on_limit TEXT;
ALTER TABLE workspace_budgets ADD COLUMN degrade_at_permille INTEGER;
