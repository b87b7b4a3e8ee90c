-- Inbound messages open (or extend) the 24-hour customer-service window for their (business number, customer).
-- The inputs are parsed and clamped by worker/_inbound.py (contact_of); should a statement fail anyway, the worker
-- bisects the batch so only the event that fails is retried.
-- Safe to repeat: the window only moves forward (greatest).
INSERT INTO wa_outbox.contacts AS c (phone_number_id, wa_id, profile_name, last_inbound_at)
SELECT m.phone_number_id, m.wa_id, max(m.profile_name), coalesce(to_timestamp(max(m.ts)), now())
FROM jsonb_to_recordset(%(messages)s::jsonb) AS m(phone_number_id text, wa_id text, profile_name text, ts bigint)
WHERE m.phone_number_id IS NOT NULL AND m.wa_id IS NOT NULL
GROUP BY m.phone_number_id, m.wa_id
ON CONFLICT (phone_number_id, wa_id) DO UPDATE
SET last_inbound_at = greatest(c.last_inbound_at, excluded.last_inbound_at),
    profile_name = coalesce(excluded.profile_name, c.profile_name),
    updated_at = now()
