-- Create a business account for an app, or update its portfolio (accounts.add_sender; a NULL portfolio keeps the
-- one recorded). A WABA that belongs to another app is left alone: the row comes back with written = false and its
-- owner, and the caller refuses (a WABA's webhooks are signed by one app).
WITH written AS (
    INSERT INTO wa_outbox.business_accounts AS b (waba_id, app_id, portfolio_id)
    VALUES (%(waba_id)s, %(app_id)s, %(portfolio_id)s)
    ON CONFLICT (waba_id) DO UPDATE
    SET portfolio_id = coalesce(excluded.portfolio_id, b.portfolio_id), updated_at = now()
    WHERE b.app_id = excluded.app_id
    RETURNING b.waba_id, b.app_id, b.portfolio_id
)
SELECT waba_id, app_id, portfolio_id, true AS written FROM written
UNION ALL
SELECT b.waba_id, b.app_id, b.portfolio_id, false FROM wa_outbox.business_accounts b
WHERE b.waba_id = %(waba_id)s AND NOT EXISTS (SELECT FROM written)
