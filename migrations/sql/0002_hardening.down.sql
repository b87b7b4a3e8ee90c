-- Undo version 2, in reverse order of its sections.

-- == Message validation ============================================================================================
-- enqueue() and enqueue_many() exactly as 0001 defined them, then the checks they called.
CREATE OR REPLACE FUNCTION wa_outbox.enqueue(
    to_ text,
    message jsonb,
    idempotency_key text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    phone_number_id text DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_recipient text := translate(coalesce(to_, ''), E' \t\n\r().-', '');
    v_sender text := coalesce(enqueue.phone_number_id,
                              (SELECT s.value FROM wa_outbox.settings s WHERE s.key = 'default_phone_number_id'));
    v_body jsonb;  -- the message minus the fields wa-outbox sets itself
    v_type text;
    v_hash text;
    v_id bigint;
    v_existing_hash text;
BEGIN
    v_recipient := ltrim(v_recipient, '+');
    IF v_recipient !~ '^[1-9][0-9]{6,14}$' THEN
        RAISE EXCEPTION 'invalid recipient %: expected an E.164 phone number such as +5511987654321', to_
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF message IS NULL OR jsonb_typeof(message) <> 'object' THEN
        RAISE EXCEPTION 'message must be a JSON object (a Cloud API message body)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF message ? 'status' OR message ? 'message_id' THEN
        RAISE EXCEPTION 'read receipts and typing indicators (status/message_id) are not outbound messages: '
                        'send them directly, they need no outbox' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_body := message - '{to,messaging_product,recipient_type,biz_opaque_callback_data}'::text[];
    -- Without `type`: the one message object the body carries (e.g. a reply with only `interactive`), else text.
    v_type := coalesce(message->>'type',
                       (SELECT min(k) FROM jsonb_object_keys(message) k
                        WHERE k IN ('text', 'template', 'image', 'audio', 'video', 'document', 'sticker', 'location',
                                    'contacts', 'interactive', 'reaction')
                        HAVING count(*) = 1),
                       'text');
    IF v_type NOT IN ('text', 'template', 'image', 'audio', 'video', 'document', 'sticker', 'location',
                      'contacts', 'interactive', 'reaction') THEN
        RAISE EXCEPTION 'unknown message type %', v_type USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(message->v_type) IS DISTINCT FROM 'object' AND NOT (v_type = 'contacts'
            AND jsonb_typeof(message->v_type) = 'array') THEN
        RAISE EXCEPTION 'message of type % needs a "%" object', v_type, v_type
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_sender IS NULL OR v_sender !~ '^[0-9]{1,32}$' THEN
        RAISE EXCEPTION 'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The request digest only matters for an idempotency key (refused reuse with another message).
    v_hash := CASE WHEN idempotency_key IS NULL THEN '' ELSE md5(v_sender || '|' || v_recipient || '|' || v_body::text) END;

    INSERT INTO wa_outbox.notifications AS n
        (phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id)
    VALUES (v_sender, v_recipient, v_body, enqueue.idempotency_key, v_hash, enqueue.correlation_id)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING n.id INTO v_id;

    IF v_id IS NULL THEN  -- a known idempotency key
        SELECT n.id, n.request_hash INTO v_id, v_existing_hash
        FROM wa_outbox.notifications n WHERE n.idempotency_key = enqueue.idempotency_key;
        IF v_existing_hash <> v_hash THEN
            RAISE EXCEPTION 'idempotency key % was already used for a different message (id %)',
                enqueue.idempotency_key, v_id USING ERRCODE = 'unique_violation';
        END IF;
        RETURN v_id;
    END IF;

    INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, correlation_id)
    VALUES (v_id, 'queued', 0, enqueue.correlation_id);
    PERFORM pg_notify('wa_outbox_notifications', '');  -- delivered at commit; wakes an idle worker at once
    RETURN v_id;
END $$;

CREATE OR REPLACE FUNCTION wa_outbox.enqueue_many(items jsonb) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    v_default text := (SELECT s.value FROM wa_outbox.settings s WHERE s.key = 'default_phone_number_id');
    v_new bigint[];
    v_keys text[];
    v_hashes text[];
    v_ids bigint[];
    v_conflict boolean;
BEGIN
    IF jsonb_typeof(items) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One pass: each item is validated as it is read, and an invalid one aborts the statement (refuse_item).
    -- Ids are drawn first, so each item knows its id whether or not its row goes in (a known key does not).
    WITH input AS (
        SELECT i.ord, i.item, i.item->'message' AS message,
               ltrim(translate(coalesce(i.item->>'to', ''), E' \t\n\r().-', ''), '+') AS recipient,
               coalesce(i.item->>'phone_number_id', v_default) AS sender
        FROM jsonb_array_elements(items) WITH ORDINALITY AS i(item, ord)
    ), checked AS (
        SELECT ord, recipient, sender,
               CASE WHEN message ?| '{to,messaging_product,recipient_type,biz_opaque_callback_data}'
                    THEN message - '{to,messaging_product,recipient_type,biz_opaque_callback_data}'::text[]
                    ELSE message END AS body,  -- copy the jsonb only when there is something to strip
               item->>'idempotency_key' AS key, item->>'correlation_id' AS correlation_id,
               nextval(pg_get_serial_sequence('wa_outbox.notifications', 'id')) AS new_id,
               CASE
                   WHEN jsonb_typeof(item) <> 'object' THEN 'must be an object'
                   WHEN recipient !~ '^[1-9][0-9]{6,14}$' THEN 'invalid recipient ' || coalesce(item->>'to', 'null')
                   WHEN jsonb_typeof(message) IS DISTINCT FROM 'object' THEN 'message must be a JSON object'
                   WHEN coalesce(message->>'type', 'text') NOT IN ('text', 'template', 'image', 'audio', 'video',
                            'document', 'sticker', 'location', 'contacts', 'interactive', 'reaction')
                       THEN 'unknown message type ' || (message->>'type')
                   WHEN message ? 'status' THEN 'read receipts are not outbound messages'
                   WHEN sender IS NULL THEN 'no sender'
                   WHEN sender !~ '^[0-9]{1,32}$' THEN 'invalid phone_number_id'
               END AS problem
        FROM input
    ), hashed AS (
        -- The request digest only matters for an idempotency key (409 on reuse with another message).
        SELECT *, CASE WHEN key IS NULL THEN '' ELSE md5(sender || '|' || recipient || '|' || body::text) END
                  AS request_hash
        FROM checked
    ), inserted AS (
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id)
        OVERRIDING SYSTEM VALUE
        SELECT CASE WHEN problem IS NULL THEN new_id ELSE wa_outbox.refuse_item(ord, problem) END,
               sender, recipient, body, key, request_hash, correlation_id
        FROM hashed ORDER BY ord
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id, correlation_id
    ), events AS (
        INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, correlation_id)
        SELECT id, 'queued', 0, correlation_id FROM inserted
    )
    SELECT array_agg(new_id ORDER BY ord), array_agg(key ORDER BY ord), array_agg(request_hash ORDER BY ord)
    INTO v_new, v_keys, v_hashes
    FROM hashed;

    -- A new statement, a new snapshot: rows just inserted are visible, so keyed items resolve to the stored id.
    SELECT array_agg(coalesce(n.id, t.new_id) ORDER BY t.ord),
           bool_or(n.request_hash IS DISTINCT FROM t.request_hash AND n.id IS NOT NULL)
    INTO v_ids, v_conflict
    FROM unnest(v_new, v_keys, v_hashes) WITH ORDINALITY AS t(new_id, key, request_hash, ord)
    LEFT JOIN wa_outbox.notifications n ON t.key IS NOT NULL AND n.idempotency_key = t.key;
    IF v_conflict THEN
        RAISE EXCEPTION 'an idempotency key was already used for a different message'
            USING ERRCODE = 'unique_violation';
    END IF;
    PERFORM pg_notify('wa_outbox_notifications', '');
    RETURN coalesce(v_ids, '{}');
END $$;

DROP FUNCTION wa_outbox.message_problem(jsonb), wa_outbox.key_problem(text, jsonb),
    wa_outbox.recipient_problem(jsonb), wa_outbox.recipient_digits(text);

-- == Webhook receiver ==============================================================================================
DROP TRIGGER webhook_events_drop_unreferenced_bodies ON wa_outbox.webhook_events;
DROP FUNCTION wa_outbox.drop_unreferenced_webhook_bodies();
DROP INDEX wa_outbox.webhook_events_raw_body;
ALTER TABLE wa_outbox.webhook_events DROP COLUMN raw_body_sha256;
DROP TABLE wa_outbox.webhook_bodies;

-- == Inbound events ================================================================================================
DROP INDEX wa_outbox.webhook_events_status_outbox_id;
DROP FUNCTION wa_outbox.callback_outbox_id(text);

-- == Dead schema ===================================================================================================
DROP INDEX wa_outbox.notifications_dead;
CREATE INDEX notifications_dead ON wa_outbox.notifications (updated_at) WHERE status = 'dead';
ALTER TABLE wa_outbox.contacts ADD COLUMN next_send_at timestamptz;

-- == The timeline's words ==========================================================================================
ALTER TABLE wa_outbox.notification_events DROP CONSTRAINT notification_events_event_check;

-- == The retry policy owns max_attempts ==========================================================================
UPDATE wa_outbox.webhook_events SET max_attempts = 10 WHERE max_attempts IS NULL;
ALTER TABLE wa_outbox.webhook_events ALTER COLUMN max_attempts SET DEFAULT 10, ALTER COLUMN max_attempts SET NOT NULL;
UPDATE wa_outbox.notifications SET max_attempts = 10 WHERE max_attempts IS NULL;
ALTER TABLE wa_outbox.notifications ALTER COLUMN max_attempts SET DEFAULT 10, ALTER COLUMN max_attempts SET NOT NULL;
