-- Version 17's default_sender() and sender_choice(): SQL functions, the same rule.
CREATE OR REPLACE FUNCTION wa_outbox.default_sender() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT s.value FROM wa_outbox.settings s
                     WHERE s.key = 'default_phone_number_id' AND s.value ~ '^[0-9]{1,32}$'),
                    (SELECT min(r.phone_number_id) FROM wa_outbox.senders r HAVING count(*) = 1))
$$;
CREATE OR REPLACE FUNCTION wa_outbox.sender_choice(given text) RETURNS text[] LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN given IS NULL THEN CASE
            WHEN d.id IS NOT NULL THEN ARRAY[d.id, NULL]
            WHEN EXISTS (SELECT FROM wa_outbox.senders)
                THEN ARRAY[NULL, 'several senders are registered and no default is set: give phone_number_id or '
                                 'an alias']
            ELSE ARRAY[NULL, 'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox'] END
        WHEN given ~ '^[0-9]{1,32}$' THEN ARRAY[given, NULL]
        WHEN given ~ '^[A-Za-z][A-Za-z0-9_.-]{0,63}$' THEN
            coalesce((SELECT ARRAY[s.phone_number_id, NULL] FROM wa_outbox.senders s WHERE s.alias = given),
                     ARRAY[NULL, format('no sender has the alias %s: give a registered alias or a phone_number_id',
                                        given)])
        ELSE ARRAY[NULL, '`phone_number_id` must be the numeric id of a business phone number'] END
    FROM (SELECT CASE WHEN given IS NULL THEN wa_outbox.default_sender() END AS id) d
$$;
