-- wa-outbox schema, version 2: hardening. One owner per rule (the retry policy's max_attempts, the words of the
-- timeline), inputs that can no longer stall or fail their neighbours, dead schema removed.

-- == The retry policy owns max_attempts ==========================================================================
-- A row's max_attempts is an override; NULL (the default now) means the workers' WA_OUTBOX_MAX_ATTEMPTS.
ALTER TABLE wa_outbox.notifications ALTER COLUMN max_attempts DROP NOT NULL, ALTER COLUMN max_attempts DROP DEFAULT;
ALTER TABLE wa_outbox.webhook_events ALTER COLUMN max_attempts DROP NOT NULL, ALTER COLUMN max_attempts DROP DEFAULT;

-- == The timeline's words, in one place (wa_outbox/states.py: TimelineEvent) =====================================
-- NOT VALID: earlier versions could write a status word Meta invented as an event; those rows stay as history
-- (the timeline is append-only), every new row is checked.
ALTER TABLE wa_outbox.notification_events ADD CONSTRAINT notification_events_event_check CHECK (event IN
    ('queued', 'sending', 'sent', 'retry_scheduled', 'throttled', 'sender_paused', 'pair_limited', 'unknown',
     'reconciled', 'released', 'delivered', 'read', 'played', 'failed', 'unrecognized_status', 'dead', 'requeued',
     'cancelled')) NOT VALID;

-- == Dead schema ===================================================================================================
ALTER TABLE wa_outbox.contacts DROP COLUMN next_send_at;  -- never written: pacing is reactive (pair_paused_until)
-- The dead-letter queue is read newest first by id (list_dead.sql, keyset pagination); nothing read it by time.
DROP INDEX wa_outbox.notifications_dead;
CREATE INDEX notifications_dead ON wa_outbox.notifications (id) WHERE status = 'dead';

-- == Inbound events ================================================================================================
-- A status webhook finds its message by wamid or by the outbox id echoed in biz_opaque_callback_data, written as
-- "<outbox id>" or "<outbox id>:<the app's own value>": the leading digits before an optional ':' (the same rule as
-- outbox_id_from_callback in wa_outbox/worker/_inbound.py; at most 18 digits, so it always fits a bigint).
CREATE FUNCTION wa_outbox.callback_outbox_id(callback text) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(callback FROM '^([0-9]{1,18})(?::|$)')::bigint
$$;
-- settle_unknown.sql must not resend an `unknown` message while a stored status event for it is still to be
-- processed (it will settle it), and must not blindly resend one whose status event went dead. Such a message
-- usually has no wamid (its send answer was lost), so its status events are found by the echoed outbox id. Partial:
-- only status events not yet done, a handful at any time.
CREATE INDEX webhook_events_status_outbox_id ON wa_outbox.webhook_events
    (wa_outbox.callback_outbox_id(payload #>> '{value,statuses,0,biz_opaque_callback_data}'))
    WHERE kind = 'status' AND status <> 'done';

-- == Webhook receiver ==============================================================================================
-- The exact bytes of webhook POSTs whose JSON had to be sanitized to fit jsonb (NUL, lone surrogates, numbers beyond
-- range) or could not be split into events at all: once per body, however many of its events refer to it. Clean
-- POSTs store none. Written in the same statement as the events that refer to them (no foreign key: its check would
-- run for every row of the hot INSERT).
CREATE TABLE wa_outbox.webhook_bodies (
    sha256       bytea PRIMARY KEY,
    body         bytea NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE wa_outbox.webhook_events ADD COLUMN raw_body_sha256 bytea;  -- NULL (no bytes) for clean events
CREATE INDEX webhook_events_raw_body ON wa_outbox.webhook_events (raw_body_sha256) WHERE raw_body_sha256 IS NOT NULL;
-- A body goes with the last event that refers to it (prune, or an operator deleting dead events). Bodies are rare
-- (poison only), so one anti-join per DELETE statement is cheap; inserts and updates never fire it.
CREATE FUNCTION wa_outbox.drop_unreferenced_webhook_bodies() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM wa_outbox.webhook_bodies b
    WHERE NOT EXISTS (SELECT 1 FROM wa_outbox.webhook_events e WHERE e.raw_body_sha256 = b.sha256);
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_events_drop_unreferenced_bodies AFTER DELETE ON wa_outbox.webhook_events
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.drop_unreferenced_webhook_bodies();

-- == Message validation ============================================================================================
-- One owner of the rules for what may be queued: wa_outbox.recipient_problem(), message_problem() and key_problem()
-- (NULL when fine, else the reason), called by enqueue() and enqueue_many(). wa_outbox/messages.py mirrors them word
-- for word, so Python callers get the same verdict before anything reaches their transaction; tests/test_validation.py
-- runs one table of cases through every entry point.

-- The recipient's digits (Meta's wa_id) without the separators people type, or NULL when that is not E.164.
CREATE FUNCTION wa_outbox.recipient_digits(to_ text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(ltrim(translate(to_, E' \t\n\r\f\x0B().-', ''), '+') FROM '^[1-9][0-9]{6,14}$')
$$;

CREATE FUNCTION wa_outbox.recipient_problem(to_ jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(to_) IS DISTINCT FROM 'string' THEN '`to` must be a string such as ''+5511987654321'''
        WHEN wa_outbox.recipient_digits(to_ #>> '{}') IS NULL
            THEN 'invalid recipient ' || to_::text || ': expected an E.164 phone number such as +5511987654321'
    END
$$;

-- An idempotency key or correlation id: absent (NULL or JSON null), or a string of 1 to 255 characters.
CREATE FUNCTION wa_outbox.key_problem(name text, value jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(value) NOT IN ('string', 'null') OR length(value #>> '{}') NOT BETWEEN 1 AND 255
                THEN '`' || name || '` must be a string of 1 to 255 characters' END
$$;

-- Why `message` cannot be queued, or NULL. `biz_opaque_callback_data` is the caller's own tracker: it is sent as
-- "<outbox id>:<tracker>", and Meta allows 512 characters (an id of up to 19 digits and ':' go first).
CREATE FUNCTION wa_outbox.message_problem(message jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v_type text := message->>'type';
BEGIN
    IF v_type IS NULL AND jsonb_typeof(message) = 'object' THEN
        -- Without `type`: the one message object the body carries (a reply with only `interactive`), else text.
        v_type := coalesce((SELECT min(k) FROM jsonb_object_keys(message) k
                            WHERE k IN ('text', 'template', 'image', 'audio', 'video', 'document', 'sticker',
                                        'location', 'contacts', 'interactive', 'reaction')
                            HAVING count(*) = 1), 'text');
    END IF;
    -- One expression, checked in order (each rule a WHEN): this runs once per item of enqueue_many.
    RETURN CASE
        WHEN jsonb_typeof(message) IS DISTINCT FROM 'object'
            THEN '`message` must be a JSON object (a Cloud API message body)'
        WHEN message ?| '{status,message_id}'
            THEN 'read receipts and typing indicators (status/message_id) are not outbound messages: '
                 'send them directly, they need no outbox'
        WHEN jsonb_typeof(message->'type') NOT IN ('string', 'null')
                OR v_type NOT IN ('text', 'template', 'image', 'audio', 'video', 'document', 'sticker', 'location',
                                  'contacts', 'interactive', 'reaction')
            THEN 'unknown message type ' || (message->'type')::text || ': expected one of text, template, image, '
                 'audio, video, document, sticker, location, contacts, interactive, reaction'
        WHEN jsonb_typeof(message->v_type) IS DISTINCT FROM 'object'
                AND NOT (v_type = 'contacts' AND jsonb_typeof(message->v_type) = 'array')
            THEN format('message of type %L needs a %L object', v_type, v_type)
        WHEN v_type = 'text' AND jsonb_typeof(message->'text'->'body') IS DISTINCT FROM 'string'
            THEN 'a text message needs text.body (a string of at most 4096 characters)'
        WHEN v_type = 'text' AND length(message->'text'->>'body') > 4096
            THEN format('text.body is %s characters; the Cloud API allows 4096', length(message->'text'->>'body'))
        WHEN jsonb_typeof(message->'biz_opaque_callback_data') NOT IN ('string', 'null')
            THEN '`biz_opaque_callback_data` must be a string'
        WHEN length(message->>'biz_opaque_callback_data') > 492
            THEN format('biz_opaque_callback_data is %s characters: at most 492 fit, as Meta allows 512 and '
                        '"<outbox id>:" goes first', length(message->>'biz_opaque_callback_data'))
        WHEN octet_length(message::text) > 65536
            THEN 'message is larger than 65536 bytes'
        -- What JSON parsers downstream (the worker's, Meta's) cannot read back exactly.
        WHEN jsonb_path_exists(message, 'strict $.**{65}')
            THEN 'message is nested deeper than 64 levels'
        WHEN jsonb_path_exists(message, 'strict $.** ? (@.type() == "number" && '
                                        '(@ > 9007199254740991 || @ < -9007199254740991))')
            THEN 'message has a number beyond 9007199254740991 (2^53 - 1) in magnitude, the range JSON parsers '
                 'read exactly'
    END;
END $$;

-- enqueue() and enqueue_many() as in 0001, with the checks above, and the caller's biz_opaque_callback_data kept.
CREATE OR REPLACE FUNCTION wa_outbox.enqueue(
    to_ text,
    message jsonb,
    idempotency_key text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    phone_number_id text DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_problem text := coalesce(wa_outbox.recipient_problem(to_jsonb(to_)), wa_outbox.message_problem(message),
                               wa_outbox.key_problem('idempotency_key', to_jsonb(idempotency_key)),
                               wa_outbox.key_problem('correlation_id', to_jsonb(correlation_id)));
    v_recipient text := wa_outbox.recipient_digits(to_);
    v_sender text := coalesce(enqueue.phone_number_id,
                              (SELECT s.value FROM wa_outbox.settings s WHERE s.key = 'default_phone_number_id'));
    v_body jsonb;  -- the message minus the fields wa-outbox sets itself
    v_hash text;
    v_id bigint;
    v_existing_hash text;
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.phone_number_id !~ '^[0-9]{1,32}$' THEN
        RAISE EXCEPTION '`phone_number_id` must be the numeric id of a business phone number'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_sender IS NULL OR v_sender !~ '^[0-9]{1,32}$' THEN
        RAISE EXCEPTION 'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_body := message - '{to,messaging_product,recipient_type}'::text[];
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
    -- Looked up once, not per item (a catalog look-up per row was a fifth of the statement's time).
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
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
               CASE WHEN jsonb_typeof(i.item->'to') = 'string' THEN wa_outbox.recipient_digits(i.item->>'to') END
                   AS recipient,
               coalesce(i.item->>'phone_number_id', v_default) AS sender
        FROM jsonb_array_elements(items) WITH ORDINALITY AS i(item, ord)
    ), checked AS (
        SELECT ord, recipient, sender,
               CASE WHEN message ?| '{to,messaging_product,recipient_type}'
                    THEN message - '{to,messaging_product,recipient_type}'::text[]
                    ELSE message END AS body,  -- copy the jsonb only when there is something to strip
               item->>'idempotency_key' AS key, item->>'correlation_id' AS correlation_id,
               nextval(v_sequence) AS new_id,
               CASE
                   WHEN jsonb_typeof(item) <> 'object' THEN 'must be an object'
                   WHEN recipient IS NULL THEN wa_outbox.recipient_problem(item->'to')
                   ELSE coalesce(
                       wa_outbox.message_problem(message),
                       wa_outbox.key_problem('idempotency_key', item->'idempotency_key'),
                       wa_outbox.key_problem('correlation_id', item->'correlation_id'),
                       CASE WHEN jsonb_typeof(item->'phone_number_id') NOT IN ('string', 'null')
                                 OR item->>'phone_number_id' !~ '^[0-9]{1,32}$'
                                THEN '`phone_number_id` must be the numeric id of a business phone number'
                            WHEN sender IS NULL OR sender !~ '^[0-9]{1,32}$'
                                THEN 'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox'
                       END)
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
