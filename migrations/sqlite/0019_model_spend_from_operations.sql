-- What was spent before model_spend existed, as the operations recorded it (see
-- migrations/postgres/0024_model_spend_from_operations.sql), from the first day of the previous
-- UTC month on.
INSERT INTO model_spend (caller, workspace, day, calls, tokens, cost)
SELECT caller, workspace, day, COUNT(*), SUM(tokens), SUM(cost)
FROM (
    SELECT COALESCE(r.caller, '') AS caller,
           r.workspace AS workspace,
           (r.received_at / 86400000000) * 86400000000 AS day,
           COALESCE(json_extract(c.value, '$.prompt_tokens'), 0)
               + COALESCE(json_extract(c.value, '$.completion_tokens'), 0) AS tokens,
           MAX(COALESCE(json_extract(c.value, '$.cost'), 0), 0) AS cost,
           r.received_at AS received_at
    FROM requests r
    JOIN operations o ON o.request_id = r.id, json_each(o.candidates) AS c
    UNION ALL
    SELECT COALESCE(r.caller, ''),
           r.workspace,
           (r.received_at / 86400000000) * 86400000000,
           COALESCE(json_extract(c.value, '$.prompt_tokens'), 0)
               + COALESCE(json_extract(c.value, '$.completion_tokens'), 0),
           MAX(COALESCE(json_extract(c.value, '$.cost'), 0), 0),
           r.received_at
    FROM requests r
    JOIN operations o ON o.request_id = r.id, json_each(o.detail, '$.calls') AS c
    WHERE o.detail IS NOT NULL
) AS spent
WHERE received_at >= CAST(strftime('%s', 'now', 'start of month', '-1 month') AS INTEGER) * 1000000
GROUP BY caller, workspace, day;
