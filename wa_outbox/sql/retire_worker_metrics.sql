-- Fold the metrics of workers that are gone into the 'retired' rows, so /metrics' sums never go backwards: this
-- worker's own rows when it stops cleanly, and the rows of any worker that wrote nothing for a day (killed). The
-- rows are deleted and their values added to 'retired' in the same statement.
-- Safe to repeat: the folded rows are deleted by the first run, so a second run matches nothing of them.
WITH gone AS (
    DELETE FROM wa_outbox.worker_metrics
    WHERE worker_id <> 'retired' AND (worker_id = %(stopping_worker_id)s OR updated_at < now() - interval '1 day')
    RETURNING metric, labels, value
)
INSERT INTO wa_outbox.worker_metrics AS m (worker_id, metric, labels, value)
SELECT 'retired', metric, labels, sum(value) FROM gone GROUP BY metric, labels
ON CONFLICT (worker_id, metric, labels) DO UPDATE SET value = m.value + excluded.value, updated_at = now()
