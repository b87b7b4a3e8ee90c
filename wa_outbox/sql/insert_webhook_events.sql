-- Store webhook events in one statement; a known dedup key is skipped (Meta redelivers at least once). One call may
-- carry the events of several concurrent POSTs (webhook_store.py coalesces them): each row has its own correlation
-- id. The events arrive as one JSON array: a single parameter is far cheaper to send than one array per column.
-- Each row says the app whose secret verified its POST (ap) and whether its number is unregistered (u): both absent
-- in single-number mode (webhook_routing.py). Rows go in dedup-key order (the unique index's: COLLATE "C") so two
-- concurrent redeliveries of overlapping batches cannot deadlock on the index.
-- Returns the keys that were new.
-- Safe to repeat: ON CONFLICT DO NOTHING; a repeat reports the keys of the first run as not new, and those
-- POSTs were never answered, so Meta's redelivery is what the count describes.
INSERT INTO wa_outbox.webhook_events
    (dedup_key, field, kind, account_id, phone_number_id, wamid, update_status, payload, correlation_id, app_id,
     unregistered)
SELECT e.k, e.f, e.t, e.a, e.p, e.w, e.s, e.v, e.c, e.ap, coalesce(e.u, false)
FROM jsonb_to_recordset(%(events)s::jsonb)
     AS e(k text, f text, t text, a text, p text, w text, s text, v jsonb, c text, ap text, u boolean)
ORDER BY e.k COLLATE "C"
ON CONFLICT (dedup_key) DO NOTHING
RETURNING dedup_key
