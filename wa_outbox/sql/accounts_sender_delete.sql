-- Remove a registered sender (accounts.remove_sender); its pacing (rate_limits) stays, as `ratelimit` keeps it.
-- Returns its business account (which goes too when it was the last: accounts_business_account_drop_if_empty).
DELETE FROM wa_outbox.senders WHERE phone_number_id = %(phone_number_id)s
RETURNING waba_id
