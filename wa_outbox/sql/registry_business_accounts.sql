-- Every registered business account and the app it belongs to: webhooks are routed by entry[].id (the WABA) and
-- must be signed by that app (registry.load).
-- Safe to repeat: it only reads.
SELECT waba_id, app_id, portfolio_id FROM wa_outbox.business_accounts ORDER BY waba_id
