-- The business_capability_update changes among webhook events %(ids)s (the inbound worker's batch), in arrival
-- order: the WABA that sent each (entry[].id) and its value (the new limits: worker/_capabilities.py).
SELECT w.id, w.account_id, w.payload -> 'value' AS value
FROM wa_outbox.webhook_events w
WHERE w.id = ANY (%(ids)s::bigint[]) AND w.kind = 'change' AND w.field = 'business_capability_update'
ORDER BY w.id
