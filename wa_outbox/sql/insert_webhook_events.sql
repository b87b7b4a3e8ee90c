-- Store one webhook POST's events in one statement; a known dedup key is skipped (Meta redelivers at least once).
-- The events arrive as one JSON array (a single parameter is far cheaper to send than eight arrays).
-- Rows go in dedup-key order so two concurrent redeliveries of overlapping batches cannot deadlock on the index.
INSERT INTO wa_outbox.webhook_events
    (dedup_key, field, kind, account_id, phone_number_id, wamid, update_status, payload, correlation_id)
SELECT e.k, e.f, e.t, e.a, e.p, e.w, e.s, e.v, %(correlation_id)s
FROM jsonb_to_recordset(%(events)s::jsonb) AS e(k text, f text, t text, a text, p text, w text, s text, v jsonb)
ORDER BY e.k
ON CONFLICT (dedup_key) DO NOTHING
