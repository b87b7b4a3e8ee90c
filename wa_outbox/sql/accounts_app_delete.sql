-- Remove an app and its secrets (accounts.remove_app), unless business accounts still belong to it: then nothing is
-- deleted and they are named (their senders must go first: `wa-outbox senders remove`).
WITH owned AS (
    SELECT array_agg(b.waba_id ORDER BY b.waba_id) AS ids FROM wa_outbox.business_accounts b
    WHERE b.app_id = %(app_id)s
), deleted AS (
    DELETE FROM wa_outbox.meta_apps a
    WHERE a.app_id = %(app_id)s
      AND NOT EXISTS (SELECT FROM wa_outbox.business_accounts b WHERE b.app_id = a.app_id)
    RETURNING a.app_id
)
SELECT EXISTS (SELECT FROM deleted) AS deleted, coalesce((SELECT ids FROM owned), '{}') AS business_accounts
