-- Retention: delete one bounded batch of processed webhook events (their dedup keys), walking the primary key from
-- %(after)s to %(until)s. `done` events received before %(before)s go, and `dead` ones before %(dead_before)s only
-- when the operator asked (NULL: kept). The caller never passes a time younger than 8 days: a key must outlive
-- Meta's 7-day redelivery window, or a redelivered update would be stored and processed again. Events a worker holds
-- are skipped. Raw bodies (webhook_bodies) go with the last event that refers to them (the statement trigger
-- webhook_events_drop_unreferenced_bodies). Returns how many went, and where the next batch starts.
WITH victims AS (
    SELECT w.id
    FROM wa_outbox.webhook_events w
    WHERE w.id > %(after)s AND w.id <= %(until)s
      AND ((w.status = 'done' AND w.received_at < %(before)s)
           OR (w.status = 'dead' AND w.received_at < %(dead_before)s))
    ORDER BY w.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM wa_outbox.webhook_events w
    WHERE w.id = ANY(ARRAY(SELECT id FROM victims))
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted) AS webhook_events,
       CASE WHEN (SELECT count(*) FROM victims) >= %(limit)s THEN (SELECT max(id) FROM victims)
            ELSE %(until)s END AS next_after
