-- Undo version 4, in reverse order of its sections.

-- == Claim and record ==============================================================================================

-- == Webhook ingest ================================================================================================

-- == History and retention =========================================================================================
-- prune: nothing to undo (version 4 adds no object for it).

-- == Bulk enqueue ==================================================================================================
-- Back to version 3: message_problem() in plpgsql (version 2), enqueue_many() as in version 2, enqueue_campaign() as
-- in version 3, and the helpers gone.
CREATE OR REPLACE FUNCTION wa_outbox.message_problem(message jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
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

CREATE OR REPLACE FUNCTION wa_outbox.enqueue_campaign(campaign_name text, phone_number_id text, items jsonb,
                                           default_sender text DEFAULT NULL)
    RETURNS TABLE (campaign_id bigint, campaign_status text, inserted integer, present integer)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_sender text := coalesce(enqueue_campaign.phone_number_id, default_sender,
                              (SELECT s.value FROM wa_outbox.settings s WHERE s.key = 'default_phone_number_id'));
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
    v_campaign wa_outbox.campaigns%ROWTYPE;
    v_inserted integer;
BEGIN
    IF jsonb_typeof(items) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue_campaign.phone_number_id !~ '^[0-9]{1,32}$' THEN
        RAISE EXCEPTION '`phone_number_id` must be the numeric id of a business phone number'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_sender IS NULL OR v_sender !~ '^[0-9]{1,32}$' THEN
        RAISE EXCEPTION 'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO wa_outbox.campaigns AS c (name, phone_number_id) VALUES (campaign_name, v_sender)
    ON CONFLICT (name) DO NOTHING;
    -- FOR SHARE: a pause, resume or cancel waits for this chunk to commit, so it also moves the rows it adds.
    SELECT * INTO v_campaign FROM wa_outbox.campaigns c WHERE c.name = campaign_name FOR SHARE;
    IF v_campaign.status = 'cancelled' THEN
        RAISE EXCEPTION 'campaign % is cancelled: nothing more can be imported into it', campaign_name
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF enqueue_campaign.phone_number_id IS NOT NULL AND v_campaign.phone_number_id <> enqueue_campaign.phone_number_id THEN
        RAISE EXCEPTION 'campaign % sends from %, not %', campaign_name, v_campaign.phone_number_id,
            enqueue_campaign.phone_number_id USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_sender := v_campaign.phone_number_id;

    WITH input AS (
        SELECT i.ord, i.item, i.item->'message' AS message,
               CASE WHEN jsonb_typeof(i.item->'to') = 'string' THEN wa_outbox.recipient_digits(i.item->>'to') END
                   AS recipient
        FROM jsonb_array_elements(items) WITH ORDINALITY AS i(item, ord)
    ), checked AS (
        SELECT ord, recipient,
               CASE WHEN message ?| '{to,messaging_product,recipient_type}'
                    THEN message - '{to,messaging_product,recipient_type}'::text[]
                    ELSE message END AS body,
               item->>'idempotency_key' AS key,
               CASE
                   WHEN jsonb_typeof(item) <> 'object' THEN 'must be an object'
                   WHEN recipient IS NULL THEN wa_outbox.recipient_problem(item->'to')
                   WHEN jsonb_typeof(item->'idempotency_key') IS DISTINCT FROM 'string'
                       THEN 'a campaign message needs its idempotency_key'
                   ELSE coalesce(wa_outbox.message_problem(message),
                                 wa_outbox.key_problem('idempotency_key', item->'idempotency_key'))
               END AS problem
        FROM input
    ), new_rows AS (
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, idempotency_key, request_hash, campaign_id, priority,
             next_attempt_at, ordered)
        OVERRIDING SYSTEM VALUE
        -- ordered = false: a campaign message neither waits in its recipient's line nor holds it (a paused campaign
        -- must never hold back an order confirmation to the same customer); priority already puts it behind.
        SELECT CASE WHEN problem IS NULL THEN nextval(v_sequence) ELSE wa_outbox.refuse_item(ord, problem) END,
               v_sender, recipient, body, key, md5(v_sender || '|' || recipient || '|' || body::text), v_campaign.id, 1,
               CASE WHEN v_campaign.status = 'paused' THEN 'infinity'::timestamptz ELSE now() END, false
        FROM checked ORDER BY ord
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id
    ), events AS (
        INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail)
        SELECT id, 'queued', 0, jsonb_build_object('campaign', campaign_name) FROM new_rows
    )
    SELECT count(*) INTO v_inserted FROM new_rows;

    IF v_inserted > 0 AND v_campaign.status = 'active' THEN
        PERFORM pg_notify('wa_outbox_notifications', '');
    END IF;
    RETURN QUERY SELECT v_campaign.id, v_campaign.status, v_inserted, jsonb_array_length(items) - v_inserted;
END $$;

CREATE OR REPLACE FUNCTION wa_outbox.recipient_digits(to_ text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(ltrim(translate(to_, E' \t\n\r\f\x0B().-', ''), '+') FROM '^[1-9][0-9]{6,14}$')
$$;

ALTER TABLE wa_outbox.notifications DROP CONSTRAINT notifications_recipient_check,
    ADD CONSTRAINT notifications_recipient_check CHECK (recipient ~ '^[1-9][0-9]{6,14}$');

DROP FUNCTION wa_outbox.batch_json_suspect(jsonb);
DROP FUNCTION wa_outbox.message_json_problem(jsonb);
DROP FUNCTION wa_outbox.message_form_problem(jsonb);
DROP FUNCTION wa_outbox.message_type(jsonb);

-- == Pacing per sender ============================================================================================
-- Version 3's grant-now bucket and its shape (one token plus 5 ms of refill), as migration 0003 made them. Negative
-- tokens (slots that were reserved ahead) are simply waited for by take_tokens().
DROP FUNCTION wa_outbox.reserve_slots(text, integer, double precision, double precision, double precision);
CREATE OR REPLACE FUNCTION wa_outbox.take_tokens(sender text, wanted integer, default_mps double precision,
                                                 OUT granted integer, OUT next_token_at timestamptz,
                                                 OUT mps double precision)
LANGUAGE plpgsql AS $$
DECLARE
    b wa_outbox.rate_limits;
    shape record;
    available double precision;
    t timestamptz := clock_timestamp();
BEGIN
    INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
    VALUES (sender, default_mps, NULL, (wa_outbox.bucket_shape(default_mps, NULL)).capacity, t)
    ON CONFLICT (phone_number_id) DO NOTHING;
    SELECT * INTO b FROM wa_outbox.rate_limits r WHERE r.phone_number_id = sender FOR UPDATE;
    shape := wa_outbox.bucket_shape(b.mps, b.burst);
    mps := shape.refill;
    IF b.paused_until > t THEN
        granted := 0;
        next_token_at := b.paused_until;
        RETURN;
    END IF;
    available := least(shape.capacity, b.tokens + extract(epoch FROM t - b.refilled_at) * shape.refill);
    -- (+ 1e-9: a token that is whole but for float rounding is whole)
    granted := greatest(0, least(wanted, floor(available + 1e-9)::integer));
    UPDATE wa_outbox.rate_limits r SET tokens = available - granted, refilled_at = t
    WHERE r.phone_number_id = sender;
    next_token_at := t + make_interval(secs => greatest(0, 1 - (available - granted)) / shape.refill);
END $$;
CREATE OR REPLACE FUNCTION wa_outbox.bucket_shape(mps double precision, burst double precision,
                                       OUT refill double precision, OUT capacity double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NULL THEN mps * (1 - 0.015) ELSE mps END,
           CASE WHEN burst IS NULL THEN 1 + mps * (1 - 0.015) * 0.005 ELSE burst END
$$;

