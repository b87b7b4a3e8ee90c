-- A business account goes with its last sender (accounts.remove_sender, or a sender moved to another WABA): the CLI
-- and /v1 create business accounts only through their senders. Returns the WABA when it went.
DELETE FROM wa_outbox.business_accounts b
WHERE b.waba_id = %(waba_id)s AND NOT EXISTS (SELECT FROM wa_outbox.senders s WHERE s.waba_id = b.waba_id)
RETURNING b.waba_id
