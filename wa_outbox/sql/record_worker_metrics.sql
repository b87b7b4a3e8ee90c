-- A worker's heartbeat carries its metrics: every series' cumulative value since it started, set (not added) in one
-- statement. Rows it wrote before (`seen`) are only updated: if one is gone, another worker retired it (this worker
-- wrote nothing for a day), and it is returned so the worker counts from the retired value on instead of counting
-- it twice. New series are inserted.
-- Safe to repeat: it sets the same values again.
WITH given AS (
    SELECT metric, labels, value, seen
    FROM jsonb_to_recordset(%(metrics)s::jsonb) AS x(metric text, labels jsonb, value double precision, seen boolean)
), updated AS (
    UPDATE wa_outbox.worker_metrics m
    SET value = g.value, updated_at = now()
    FROM given g
    WHERE m.worker_id = %(worker_id)s AND m.metric = g.metric AND m.labels = g.labels AND g.seen
    RETURNING m.metric, m.labels
), inserted AS (
    INSERT INTO wa_outbox.worker_metrics AS m (worker_id, metric, labels, value)
    SELECT %(worker_id)s, metric, labels, value FROM given WHERE NOT seen
    ON CONFLICT (worker_id, metric, labels) DO UPDATE SET value = excluded.value, updated_at = now()
    RETURNING m.metric
)
SELECT g.metric, g.labels FROM given g
WHERE g.seen AND NOT EXISTS (SELECT 1 FROM updated u WHERE u.metric = g.metric AND u.labels = g.labels)
