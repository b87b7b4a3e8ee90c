-- The feed events of stored webhook events (inbound messages and changes), for the Python handlers
-- (WA_OUTBOX_INBOUND_HANDLERS): they get the same envelope an endpoint gets. One probe of events_webhook_event each.
-- Safe to repeat: it only reads.
SELECT (e.data ->> 'webhook_event_id')::bigint AS webhook_event_id, e.seq, e.type, e.occurred_at, e.data
FROM wa_outbox.events e
WHERE (e.data ->> 'webhook_event_id')::bigint = ANY (%(ids)s::bigint[]) AND e.data ? 'webhook_event_id'
