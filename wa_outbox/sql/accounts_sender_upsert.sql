-- Register a sender or update it (accounts.add_sender): its business account, token (encrypted, or the variable's
-- name) and, when given, alias and display number (NULL keeps the recorded one). Returns whether it was new and the
-- business account it had before (the RETURNING subquery sees the table as it was), so an emptied one can go.
INSERT INTO wa_outbox.senders AS s (phone_number_id, waba_id, alias, display_phone_number, token_enc, token_ref,
                                    token_fingerprint)
VALUES (%(phone_number_id)s, %(waba_id)s, %(alias)s, %(display_phone_number)s, %(token_enc)s, %(token_ref)s,
        %(token_fingerprint)s)
ON CONFLICT (phone_number_id) DO UPDATE
SET waba_id = excluded.waba_id, alias = coalesce(excluded.alias, s.alias),
    display_phone_number = coalesce(excluded.display_phone_number, s.display_phone_number),
    token_enc = excluded.token_enc, token_ref = excluded.token_ref, token_fingerprint = excluded.token_fingerprint,
    token_updated_at = now(), updated_at = now()
RETURNING s.phone_number_id, (s.xmax = 0) AS created,
          (SELECT o.waba_id FROM wa_outbox.senders o WHERE o.phone_number_id = %(phone_number_id)s) AS previous_waba_id
