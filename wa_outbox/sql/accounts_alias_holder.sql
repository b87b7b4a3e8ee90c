-- The other sender that holds an alias, if any (accounts.add_sender refuses it by name before the UNIQUE would).
SELECT phone_number_id FROM wa_outbox.senders
WHERE alias = %(alias)s AND phone_number_id <> %(phone_number_id)s
