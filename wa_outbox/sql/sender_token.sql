-- One sender's access token as stored (encrypted, or the name of the environment variable holding it), resolved by
-- registry.token_of at send time so a rotated token is used from the next send. No row: not a registered sender.
-- Safe to repeat: it only reads.
SELECT token_enc, token_ref, token_fingerprint, token_updated_at
FROM wa_outbox.senders WHERE phone_number_id = %(phone_number_id)s
