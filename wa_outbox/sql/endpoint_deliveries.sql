-- An endpoint's recent deliveries, newest event first, each with its attempts (wa-outbox endpoints deliveries,
-- GET /v1/endpoints/<id>/deliveries, the ops page); `failed` keeps only those whose retries ran out. The event's type
-- is read from the feed while the event is kept (prune removes events and deliveries by age).
-- Safe to repeat: a read.
SELECT d.id, d.event_seq, 'evt_' || d.event_seq AS event_id, ev.type AS event_type, d.status, d.attempts,
       d.next_attempt_at, d.last_status_code, d.last_error, d.created_at, d.updated_at, d.delivered_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                          'attempt', a.attempt, 'attempted_at', a.attempted_at, 'status_code', a.status_code,
                          'latency_ms', a.latency_ms, 'response_head', a.response_head, 'error', a.error)
                        ORDER BY a.attempt)
                 FROM wa_outbox.delivery_attempts a WHERE a.delivery_id = d.id), '[]'::jsonb) AS attempt_log
FROM wa_outbox.deliveries d
LEFT JOIN wa_outbox.events ev ON ev.seq = d.event_seq
WHERE d.endpoint_id = %(id)s AND (NOT %(failed)s OR d.status = 'failed')
ORDER BY d.event_seq DESC
LIMIT %(limit)s
