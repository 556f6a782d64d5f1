-- What was spent before model_spend existed, as the operations recorded it (each candidate's and
-- each other call's tokens and cost), added to the UTC day its request was received in: from the
-- first day of the previous UTC month on, which covers every window a budget reads.
INSERT INTO model_spend (caller, workspace, day, calls, tokens, cost)
SELECT COALESCE(r.caller, ''),
       r.workspace,
       date_trunc('day', r.received_at, 'UTC'),
       COUNT(*),
       SUM(COALESCE((c ->> 'prompt_tokens')::BIGINT, 0)
           + COALESCE((c ->> 'completion_tokens')::BIGINT, 0)),
       SUM(GREATEST(COALESCE((c ->> 'cost')::DOUBLE PRECISION, 0), 0))
FROM requests r
JOIN operations o ON o.request_id = r.id
CROSS JOIN LATERAL jsonb_array_elements(
    o.candidates
    || CASE WHEN jsonb_typeof(o.detail -> 'calls') = 'array' THEN o.detail -> 'calls'
            ELSE '[]'::jsonb END
) AS c
WHERE r.received_at >= date_trunc('month', now(), 'UTC') - INTERVAL '1 month'
GROUP BY 1, 2, 3;
