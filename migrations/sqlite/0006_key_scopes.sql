-- What each API key may do: a comma-separated list of read, write, run, admin. `writ keys create`
-- always writes it. NULL is a key issued before scopes existed: it keeps what every key could do
-- then (read,write,run), so an upgrade locks no one out; `admin` must be granted on a new key.
ALTER TABLE api_keys ADD COLUMN scopes TEXT;

-- The key's scope that allowed a request (what its route or tool required), so the audit log
-- shows which scope authorised a write or a run. NULL when auth was off, and for requests
-- recorded before scopes existed.
ALTER TABLE requests ADD COLUMN scope TEXT;
