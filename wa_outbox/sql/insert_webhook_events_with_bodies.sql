-- insert_webhook_events.sql for a batch holding sanitized or dead events (webhook_store.py): the same INSERT (app and
-- unregistered flag included), plus each row's status and last_error (dead at once: JSON that cannot be processed)
-- and a reference to the raw body of its POST, and the raw bodies themselves (wa_outbox.webhook_bodies, once per
-- SHA-256) — only those a new row refers to, so a redelivery stores no bytes again. Clean POSTs never run this:
-- their statement stays as it was. Rows and bodies go in key order so concurrent overlapping batches cannot
-- deadlock. Returns the keys that were new.
-- Safe to repeat: ON CONFLICT DO NOTHING on both tables; a repeat reports the keys of the first run as not new, and
-- those POSTs were never answered, so Meta's redelivery is what the count describes.
WITH new_events AS (
    INSERT INTO wa_outbox.webhook_events
        (dedup_key, field, kind, account_id, phone_number_id, wamid, update_status, payload, correlation_id,
         raw_body_sha256, status, last_error, processed_at, app_id, unregistered)
    SELECT e.k, e.f, e.t, e.a, e.p, e.w, e.s, e.v, e.c, decode(e.r, 'hex'),
           coalesce(e.st, 'queued'),  -- the column's default
           e.err, CASE WHEN e.st IS NOT NULL THEN now() END, e.ap, coalesce(e.u, false)
    FROM jsonb_to_recordset(%(events)s::jsonb)
         AS e(k text, f text, t text, a text, p text, w text, s text, v jsonb, c text, r text, st text, err text,
              ap text, u boolean)
    ORDER BY e.k COLLATE "C"
    ON CONFLICT (dedup_key) DO NOTHING
    RETURNING dedup_key, raw_body_sha256
), new_bodies AS (
    INSERT INTO wa_outbox.webhook_bodies (sha256, body)
    SELECT decode(b.sha256, 'hex'), b.body
    FROM unnest(%(digests)s::text[], %(bodies)s::bytea[]) AS b(sha256, body)
    WHERE decode(b.sha256, 'hex') IN (SELECT raw_body_sha256 FROM new_events)
    ORDER BY 1
    ON CONFLICT (sha256) DO NOTHING
)
SELECT dedup_key FROM new_events
