-- The ops page: each endpoint (up to %(limit)s) with its state, why and since when it is disabled, since when it
-- fails, its deliveries pending and failed (each count stopping at %(cap)s, on the partial indexes
-- deliveries_conversation and deliveries_failed) and its latest %(attempts)s attempts (delivery_attempts_endpoint).
-- Never a secret.
-- Safe to repeat: a read.
SELECT e.id, e.url, e.description, e.event_types, e.ordered, e.state, e.disabled_reason, e.disabled_at,
       e.failing_since, e.secret_fingerprint,
       (SELECT count(*) FROM (SELECT 1 FROM wa_outbox.deliveries d
                              WHERE d.endpoint_id = e.id AND d.status IN ('queued', 'delivering')
                              LIMIT %(cap)s) p) AS pending,
       (SELECT count(*) FROM (SELECT 1 FROM wa_outbox.deliveries d
                              WHERE d.endpoint_id = e.id AND d.status = 'failed' LIMIT %(cap)s) f) AS failed,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                          'delivery_id', a.delivery_id, 'attempt', a.attempt, 'attempted_at', a.attempted_at,
                          'status_code', a.status_code, 'latency_ms', a.latency_ms, 'error', a.error)
                        ORDER BY a.attempted_at DESC)
                 FROM (SELECT * FROM wa_outbox.delivery_attempts a WHERE a.endpoint_id = e.id
                       ORDER BY a.attempted_at DESC LIMIT %(attempts)s) a), '[]'::jsonb) AS recent_attempts
FROM wa_outbox.endpoints e
ORDER BY e.id
LIMIT %(limit)s
