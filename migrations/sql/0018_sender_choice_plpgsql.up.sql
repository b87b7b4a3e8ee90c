-- default_sender() and sender_choice() in PL/pgSQL, same rule: as SQL functions (not inlinable: sub-selects, a FROM)
-- each call parsed and planned both bodies again, ~0.4 ms of CPU per enqueue statement (schema.sql says more).
-- Brief: two functions replaced, no table read.
CREATE OR REPLACE FUNCTION wa_outbox.default_sender() RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT s.value FROM wa_outbox.settings s
                     WHERE s.key = 'default_phone_number_id' AND s.value ~ '^[0-9]{1,32}$'),
                    (SELECT min(r.phone_number_id) FROM wa_outbox.senders r HAVING count(*) = 1));
END
$$;
CREATE OR REPLACE FUNCTION wa_outbox.sender_choice(given text) RETURNS text[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_default text;
BEGIN
    IF given IS NULL THEN
        v_default := wa_outbox.default_sender();
        IF v_default IS NOT NULL THEN
            RETURN ARRAY[v_default, NULL];
        ELSIF EXISTS (SELECT FROM wa_outbox.senders) THEN
            RETURN ARRAY[NULL, 'several senders are registered and no default is set: give phone_number_id or '
                               'an alias'];
        END IF;
        RETURN ARRAY[NULL, 'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox'];
    ELSIF given ~ '^[0-9]{1,32}$' THEN
        RETURN ARRAY[given, NULL];
    ELSIF given ~ '^[A-Za-z][A-Za-z0-9_.-]{0,63}$' THEN
        RETURN coalesce((SELECT ARRAY[s.phone_number_id, NULL] FROM wa_outbox.senders s WHERE s.alias = given),
                        ARRAY[NULL, format('no sender has the alias %s: give a registered alias or a phone_number_id',
                                           given)]);
    END IF;
    RETURN ARRAY[NULL, '`phone_number_id` must be the numeric id of a business phone number'];
END
$$;
