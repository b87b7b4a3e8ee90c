-- One message with its whole timeline.
-- Safe to repeat: a read. A message its template holds is due at 'infinity' (no claim reads it): shown as no next
-- attempt (NULL; its hold_reason says what it waits for), which a client's date type can hold.
SELECT n.id, n.status, n.hold_reason, n.phone_number_id, n.recipient, n.message, n.attempts, n.max_attempts,
       nullif(n.next_attempt_at, 'infinity') AS next_attempt_at,
       n.last_error, n.wamid, n.correlation_id, n.idempotency_key, n.created_at, n.updated_at, n.sent_at,
       n.delivered_at, n.read_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object('event', e.event, 'attempt', e.attempt, 'detail', e.detail,
                                                     'correlation_id', e.correlation_id, 'at', e.created_at)
                                  ORDER BY e.id)
                 FROM wa_outbox.notification_events e WHERE e.notification_id = n.id), '[]'::jsonb) AS timeline
FROM wa_outbox.notifications n
WHERE n.id = %(id)s
