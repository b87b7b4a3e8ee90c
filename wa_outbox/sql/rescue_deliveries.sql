-- Deliveries whose worker lost its lease (killed, frozen) go back to the queue, due now: the receiver may have got
-- it already (deliveries are at least once; the webhook-id is the same, for the receiver to deduplicate) -- or to
-- `failed` when the lost attempt was the schedule's last (%(max_attempts)s: attempts are counted at claim), which
-- wakes the next delivery of its conversation on an ordered endpoint (as record_deliveries.sql does).
-- Also a safety net for ordered endpoints: a held delivery (next_attempt_at = 'infinity') with no earlier delivery of
-- its conversation left undelivered is woken. Only a dispatch and a record running at the same moment can miss a
-- wake-up (each statement's snapshot misses the other's rows), so only the rows held in the last
-- %(held_window)s seconds are looked at (the workers pass a few minutes, and now and then every held row).
-- Safe to repeat: guarded by status, lease expiry and the hold; a second run matches nothing.
WITH rescued AS (
    UPDATE wa_outbox.deliveries d
    SET status = CASE WHEN d.attempts >= %(max_attempts)s THEN 'failed' ELSE 'queued' END,
        next_attempt_at = now(), locked_by = NULL, locked_until = NULL, updated_at = now(),
        last_error = 'the worker lost its lease during the delivery'
    WHERE d.id IN (SELECT id FROM wa_outbox.deliveries
                   WHERE status = 'delivering' AND locked_until < now()
                   ORDER BY locked_until LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
      AND d.status = 'delivering' AND d.locked_until < now()
    RETURNING d.id, d.endpoint_id, d.phone_number_id, d.wa_id, d.status
), after_failed AS (
    SELECT (SELECT min(x.id) FROM wa_outbox.deliveries x
            WHERE x.endpoint_id = r.endpoint_id AND x.phone_number_id = r.phone_number_id
              AND x.wa_id = r.wa_id AND x.status = 'queued' AND x.id > r.id) AS id
    FROM rescued r WHERE r.status = 'failed'
), missed AS (
    SELECT h.id FROM wa_outbox.deliveries h
    WHERE h.status = 'queued' AND h.next_attempt_at = 'infinity' AND h.created_at > now() - make_interval(secs => %(held_window)s)
      AND NOT EXISTS (SELECT 1 FROM wa_outbox.deliveries p
                      WHERE p.endpoint_id = h.endpoint_id AND p.phone_number_id = h.phone_number_id
                        AND p.wa_id = h.wa_id AND p.id < h.id AND p.status IN ('queued', 'delivering'))
    ORDER BY h.created_at LIMIT %(limit)s
), woken AS (
    UPDATE wa_outbox.deliveries n SET next_attempt_at = now(), updated_at = now()
    WHERE n.id IN (SELECT id FROM after_failed UNION SELECT id FROM missed)
      AND n.status = 'queued' AND n.next_attempt_at = 'infinity'
    RETURNING n.id
)
SELECT id, status FROM rescued
