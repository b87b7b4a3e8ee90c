-- Replace a sender's token (accounts.set_token): the worker reads it at each send (sender_token.sql), so the next
-- send uses it. No row: not a registered sender.
UPDATE wa_outbox.senders
SET token_enc = %(token_enc)s, token_ref = %(token_ref)s, token_fingerprint = %(token_fingerprint)s,
    token_updated_at = now(), updated_at = now()
WHERE phone_number_id = %(phone_number_id)s
RETURNING phone_number_id
