-- Store one webhook POST's events in one statement; a known dedup key is skipped (Meta redelivers at least once).
-- Rows go in dedup-key order so two concurrent redeliveries of overlapping batches cannot deadlock on the index.
INSERT INTO wa_outbox.webhook_events
    (dedup_key, field, kind, account_id, phone_number_id, wamid, update_status, payload, correlation_id)
SELECT e.dedup_key, e.field, e.kind, e.account_id, e.phone_number_id, e.wamid, e.update_status, e.payload::jsonb,
       %(correlation_id)s
FROM unnest(%(dedup_keys)s::text[], %(fields)s::text[], %(kinds)s::text[], %(account_ids)s::text[],
            %(phone_number_ids)s::text[], %(wamids)s::text[], %(update_statuses)s::text[], %(payloads)s::text[])
     AS e(dedup_key, field, kind, account_id, phone_number_id, wamid, update_status, payload)
ORDER BY e.dedup_key
ON CONFLICT (dedup_key) DO NOTHING
