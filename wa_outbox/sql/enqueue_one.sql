-- The HTTP API's enqueue: wa_outbox.enqueue() plus the row's status and whether this call created it, in one
-- statement (one transaction, one round trip). A row created by this very statement is invisible to its snapshot,
-- so "no row found" means "just created"; a replayed idempotency key finds the existing row and its status.
-- Safe to repeat: outbox.accept_message always passes an idempotency key (the caller's, or a generated `auto:`
-- one), so a second run after a lost COMMIT reply returns the row the first run created.
WITH e AS (
    SELECT wa_outbox.enqueue(%(to)s, %(message)s::jsonb, %(idempotency_key)s, %(correlation_id)s,
                             %(phone_number_id)s, %(ordered)s) AS id
)
SELECT e.id, coalesce(n.status, 'queued') AS status, n.id IS NULL AS created
FROM e LEFT JOIN wa_outbox.notifications n ON n.id = e.id
