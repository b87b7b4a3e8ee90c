-- The workers disable endpoints (%(disabled)s: a JSON array of {id, reason}): 'gone' after a 410, 'failing' after
-- failing continuously for WA_OUTBOX_ENDPOINT_DISABLE_AFTER_DAYS (delivery_policy.py). Their queued deliveries stay
-- queued: enabling the endpoint again resumes them. Returns the endpoints this statement disabled.
-- Safe to repeat: only an enabled endpoint moves; a second run matches nothing.
WITH wanted AS (
    SELECT DISTINCT ON (id) id, reason FROM jsonb_to_recordset(%(disabled)s::jsonb) AS w(id text, reason text)
    ORDER BY id, reason DESC  -- 'gone' before 'failing': the receiver's own word
)
UPDATE wa_outbox.endpoints en
SET state = 'disabled', disabled_reason = w.reason, disabled_at = now(), updated_at = now()
FROM wanted w
WHERE en.id = w.id AND en.state = 'enabled'
RETURNING en.id, en.url, en.disabled_reason AS reason
