-- What a budget does near its limits (`on_limit`: NULL or 'refuse' refuses at the limit only;
-- 'degrade' asks fewer and cheaper models from `degrade_at_permille` thousandths of a limit on,
-- and still refuses at the limit). A key's and a workspace's budget alike.
ALTER TABLE key_budgets ADD COLUMN on_limit TEXT;
ALTER TABLE key_budgets ADD COLUMN degrade_at_permille BIGINT;
ALTER TABLE workspace_budgets ADD COLUMN on_limit TEXT;
ALTER TABLE workspace_budgets ADD COLUMN degrade_at_permille BIGINT;
