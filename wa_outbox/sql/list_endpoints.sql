-- Every endpoint, oldest first (wa-outbox endpoints list, GET /v1/endpoints, the ops page): never its secret, only
-- the secret's fingerprint. The deliveries still pending and failed are counted on their partial indexes
-- (deliveries_conversation, deliveries_failed), each count stopping at %(cap)s: a backlog's order of magnitude.
-- Safe to repeat: a read.
SELECT e.id, e.url, e.description, e.event_types, e.ordered, e.state, e.disabled_reason, e.disabled_at,
       e.secret_fingerprint, e.previous_secret_until, e.failing_since, e.created_at, e.updated_at,
       (SELECT count(*) FROM (SELECT 1 FROM wa_outbox.deliveries d
                              WHERE d.endpoint_id = e.id AND d.status IN ('queued', 'delivering')
                              LIMIT %(cap)s) p) AS pending,
       (SELECT count(*) FROM (SELECT 1 FROM wa_outbox.deliveries d
                              WHERE d.endpoint_id = e.id AND d.status = 'failed' LIMIT %(cap)s) f) AS failed
FROM wa_outbox.endpoints e
WHERE %(id)s::text IS NULL OR e.id = %(id)s
ORDER BY e.created_at, e.id
