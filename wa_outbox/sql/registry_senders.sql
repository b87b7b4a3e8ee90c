-- The registered senders with their business account, app and portfolio (registry.load): tokens stay in the table,
-- read one sender at a time when a send needs one (sender_token.sql).
-- Safe to repeat: it only reads.
SELECT s.phone_number_id, s.waba_id, b.app_id, b.portfolio_id, s.alias, s.display_phone_number,
       s.token_fingerprint, s.token_updated_at
FROM wa_outbox.senders s
JOIN wa_outbox.business_accounts b ON b.waba_id = s.waba_id
ORDER BY s.phone_number_id
