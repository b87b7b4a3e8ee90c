-- Version 4: scale. One section per concern; the down file undoes them in reverse order.

-- == Pacing per sender ============================================================================================
-- Reserved send slots: a generic cell rate algorithm per sender. Version 3's bucket granted tokens "now", and the
-- send followed after the rest of the claim, its commit and a thread hand-off: that delay varied by tens of ms, so
-- sends granted 1/R apart could arrive closer together than that, and a bucket of about one token lost every token
-- that came while no worker was asking. Now a claim reserves each row's send time (its slot) up to a short horizon
-- ahead, slots spaced 1/R, and the worker sends each row at its slot: the spacing at Meta's end is the slot spacing
-- plus a small, nearly constant delay, and the rate no longer depends on how fast workers come back to claim.
-- The state stays in rate_limits (tokens, refilled_at): the bucket level at time t is
--     tokens + (t - refilled_at) * refill, at most the capacity,
-- and the k-th slot a claim takes is when that level reaches k: t + greatest(0, k - level) / refill. Reserving k
-- slots takes k tokens at once, so `tokens` goes negative while slots are reserved ahead (at most horizon * refill).
-- That is exactly a GCRA with tolerance (capacity - 1) / refill; the theoretical time of the next slot is
-- refilled_at + (capacity - tokens) / refill.
-- The shape: by default (burst NULL) the refill is 98.5 % of `mps` and the capacity exactly one slot, so consecutive
-- sends are 1/(0.985 mps) apart and any mps + 1 of them span 1.015 s: a send may arrive up to 15 ms later than its
-- slot relative to the others (grant-to-arrival jitter; bench/pacing.py measures it) and still no one-second window
-- at Meta's end holds more than mps. An explicit burst (`ratelimit set --burst B`) is the classic bucket: refill at
-- mps, capacity B.
CREATE OR REPLACE FUNCTION wa_outbox.bucket_shape(mps double precision, burst double precision,
                                                  OUT refill double precision, OUT capacity double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NULL THEN mps * (1 - 0.015) ELSE mps END,
           CASE WHEN burst IS NULL THEN 1 ELSE burst END
$$;

-- reserve_slots(): up to `wanted` send slots for a sender, none earlier than `lead` seconds from now (the claim's
-- own latency: its rows reach the worker before their slot, so an idle sender's first send is not late on its slot
-- and squeezed against the next ones; at most one slot interval, so at rates the workers cannot reach, where the
-- schedule never fills, a claim's rows still go at once) and none later than `horizon` seconds after that; none
-- while it is paused.
-- Slot k (1-based) is at slots_from + greatest(0, k - level) / refill; the caller puts a row that got no slot back
-- until its slot would come within the horizon (the same formula). Paused: slots_from is the pause's end and
-- nothing is granted. Creates the bucket at the default rate on first use. The row lock makes concurrent workers on
-- any number of machines share one schedule; the time is read after it is taken, so a claim that waited for the
-- lock still reserves from the schedule as the previous holder left it.
CREATE FUNCTION wa_outbox.reserve_slots(sender text, wanted integer, default_mps double precision,
                                        lead double precision, horizon double precision,
                                        OUT granted integer, OUT slots_from timestamptz, OUT level double precision,
                                        OUT refill double precision, OUT paused boolean)
LANGUAGE plpgsql AS $$
DECLARE
    b wa_outbox.rate_limits;
    shape record;
    t timestamptz;
BEGIN
    INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
    VALUES (sender, default_mps, NULL, (wa_outbox.bucket_shape(default_mps, NULL)).capacity, clock_timestamp())
    ON CONFLICT (phone_number_id) DO NOTHING;
    SELECT * INTO b FROM wa_outbox.rate_limits r WHERE r.phone_number_id = sender FOR UPDATE;
    shape := wa_outbox.bucket_shape(b.mps, b.burst);
    t := clock_timestamp() + make_interval(secs => least(lead, 1 / shape.refill));  -- the earliest slot
    refill := shape.refill;
    IF b.paused_until > t THEN
        granted := 0;
        slots_from := b.paused_until;
        level := shape.capacity;  -- the bucket refills during the pause
        paused := true;
        RETURN;
    END IF;
    paused := false;
    slots_from := t;
    level := least(shape.capacity, b.tokens + extract(epoch FROM t - b.refilled_at) * shape.refill);
    -- slot k is within the horizon while (k - level) / refill <= horizon (+ 1e-9: float rounding)
    granted := greatest(0, least(wanted, floor(level + horizon * shape.refill + 1e-9)::integer));
    UPDATE wa_outbox.rate_limits r SET tokens = level - granted, refilled_at = t WHERE r.phone_number_id = sender;
END $$;
-- Version 3's grant-now bucket: replaced by reserve_slots().
DROP FUNCTION wa_outbox.take_tokens(text, integer, double precision);

-- == Bulk enqueue ==================================================================================================
-- The same rules for what may be queued (the verdicts and reasons of version 2, word for word), in a form that costs
-- a bulk enqueue a fraction of what it did. message_problem() was one plpgsql call per item, and its last two rules
-- walk the whole message with a JSON path (about two thirds of its time). Now:
-- - every rule is a LANGUAGE sql expression without sub-queries, so Postgres inlines it into the statement that
--   calls it (no function call per item);
-- - the two walking rules are their own function, message_json_problem(), and a batch asks batch_json_suspect()
--   once, over the whole array, whether any item could break them; only then does it ask item by item. The rules
--   are the last in order, so skipping them when no item can break them changes no verdict.
-- message_problem(message) = coalesce(message_form_problem(message), message_json_problem(message)), as before.

-- The recipient's digits, as in version 2, without its two regular expressions for what is digits already (as every
-- Python caller sends it): 7 to 15 digits, not starting with 0. The regular expressions were a tenth of a bulk
-- enqueue's time.
CREATE OR REPLACE FUNCTION wa_outbox.recipient_digits(to_ text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN length(to_) BETWEEN 7 AND 15 AND ltrim(to_, '0123456789') = '' AND left(to_, 1) <> '0' THEN to_
                ELSE substring(ltrim(translate(to_, E' \t\n\r\f\x0B().-', ''), '+') FROM '^[1-9][0-9]{6,14}$') END
$$;

-- The table's own rule for a recipient (version 1), the same without a regular expression: it is checked for every
-- row written, inserts and updates alike (a regular expression per row was 4 % of a bulk enqueue). NOT VALID: the
-- rows there were checked by version 1's identical rule, and validating would hold the table's lock for a scan.
ALTER TABLE wa_outbox.notifications DROP CONSTRAINT notifications_recipient_check,
    ADD CONSTRAINT notifications_recipient_check
        CHECK (length(recipient) BETWEEN 7 AND 15 AND ltrim(recipient, '0123456789') = '' AND left(recipient, 1) <> '0')
        NOT VALID;

-- The type the rules read: `type`, else the one message object the body carries (a reply with only `interactive`),
-- else text, as the Cloud API reads it.
CREATE FUNCTION wa_outbox.message_type(message jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(message->>'type', CASE
        WHEN (message ? 'text')::int + (message ? 'template')::int + (message ? 'image')::int
             + (message ? 'audio')::int + (message ? 'video')::int + (message ? 'document')::int
             + (message ? 'sticker')::int + (message ? 'location')::int + (message ? 'contacts')::int
             + (message ? 'interactive')::int + (message ? 'reaction')::int = 1
        THEN CASE WHEN message ? 'text' THEN 'text' WHEN message ? 'template' THEN 'template'
                  WHEN message ? 'image' THEN 'image' WHEN message ? 'audio' THEN 'audio'
                  WHEN message ? 'video' THEN 'video' WHEN message ? 'document' THEN 'document'
                  WHEN message ? 'sticker' THEN 'sticker' WHEN message ? 'location' THEN 'location'
                  WHEN message ? 'contacts' THEN 'contacts' WHEN message ? 'interactive' THEN 'interactive'
                  ELSE 'reaction' END
        ELSE 'text' END)
$$;

-- Every rule but the two that walk the message, checked in order (each rule a WHEN).
CREATE FUNCTION wa_outbox.message_form_problem(message jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(message) IS DISTINCT FROM 'object'
            THEN '`message` must be a JSON object (a Cloud API message body)'
        WHEN message ?| '{status,message_id}'
            THEN 'read receipts and typing indicators (status/message_id) are not outbound messages: '
                 'send them directly, they need no outbox'
        WHEN jsonb_typeof(message->'type') NOT IN ('string', 'null')
                OR wa_outbox.message_type(message) NOT IN ('text', 'template', 'image', 'audio', 'video', 'document',
                                                           'sticker', 'location', 'contacts', 'interactive',
                                                           'reaction')
            THEN 'unknown message type ' || (message->'type')::text || ': expected one of text, template, image, '
                 'audio, video, document, sticker, location, contacts, interactive, reaction'
        WHEN jsonb_typeof(message->wa_outbox.message_type(message)) IS DISTINCT FROM 'object'
                AND NOT (wa_outbox.message_type(message) = 'contacts' AND jsonb_typeof(message->'contacts') = 'array')
            THEN 'message of type ' || quote_literal(wa_outbox.message_type(message)) || ' needs a '
                 || quote_literal(wa_outbox.message_type(message)) || ' object'
        WHEN wa_outbox.message_type(message) = 'text'
                AND jsonb_typeof(message->'text'->'body') IS DISTINCT FROM 'string'
            THEN 'a text message needs text.body (a string of at most 4096 characters)'
        WHEN wa_outbox.message_type(message) = 'text' AND length(message->'text'->>'body') > 4096
            THEN 'text.body is ' || length(message->'text'->>'body')::text
                 || ' characters; the Cloud API allows 4096'
        WHEN jsonb_typeof(message->'biz_opaque_callback_data') NOT IN ('string', 'null')
            THEN '`biz_opaque_callback_data` must be a string'
        WHEN length(message->>'biz_opaque_callback_data') > 492
            THEN 'biz_opaque_callback_data is ' || length(message->>'biz_opaque_callback_data')::text
                 || ' characters: at most 492 fit, as Meta allows 512 and "<outbox id>:" goes first'
        WHEN octet_length(message::text) > 65536
            THEN 'message is larger than 65536 bytes'
    END
$$;

-- What JSON parsers downstream (the worker's, Meta's) cannot read back exactly.
CREATE FUNCTION wa_outbox.message_json_problem(message jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_path_exists(message, 'strict $.**{65}')
            THEN 'message is nested deeper than 64 levels'
        WHEN jsonb_path_exists(message, 'strict $.** ? (@.type() == "number" && '
                                        '(@ > 9007199254740991 || @ < -9007199254740991))')
            THEN 'message has a number beyond 9007199254740991 (2^53 - 1) in magnitude, the range JSON parsers '
                 'read exactly'
    END
$$;

-- Whether any item of a batch (a JSON array of {"message": …, …}) could break message_json_problem()'s rules:
-- a value 67 levels below the array is 65 below an item's message, and a number out of range is one anywhere.
-- One walk over the batch instead of two per item. False: no item needs message_json_problem().
CREATE FUNCTION wa_outbox.batch_json_suspect(items jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_path_exists(items, 'strict $.**{67}')
        OR jsonb_path_exists(items, 'strict $.** ? (@.type() == "number" && '
                                    '(@ > 9007199254740991 || @ < -9007199254740991))')
$$;

CREATE OR REPLACE FUNCTION wa_outbox.message_problem(message jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(wa_outbox.message_form_problem(message), wa_outbox.message_json_problem(message))
$$;

-- enqueue_many() as in version 2, faster: the rules above inlined and the walking ones asked once per batch, each
-- item's fields read once, and the look-up of stored ids for known idempotency keys skipped when no item has one.
-- work_mem: a chunk of 5,000 template messages outgrows the default 4 MB, and its sort went to disk.
CREATE OR REPLACE FUNCTION wa_outbox.enqueue_many(items jsonb) RETURNS bigint[] LANGUAGE plpgsql
    SET work_mem = '64MB' AS $$
DECLARE
    v_default text := (SELECT s.value FROM wa_outbox.settings s WHERE s.key = 'default_phone_number_id');
    -- Looked up once, not per item (a catalog look-up per row was a fifth of the statement's time).
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
    -- The default sender's verdict, once per batch: a regular expression per item was 7 % of the statement.
    v_default_ok boolean := v_default ~ '^[0-9]{1,32}$';
    v_json_suspect boolean;
    v_new bigint[];
    v_keys text[];
    v_hashes text[];
    v_keyed boolean;
    v_ids bigint[];
    v_conflict boolean;
BEGIN
    IF jsonb_typeof(items) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_json_suspect := wa_outbox.batch_json_suspect(items);
    -- One pass: each item is validated as it is read, and an invalid one aborts the statement (refuse_item).
    -- Ids are drawn first, so each item knows its id whether or not its row goes in (a known key does not).
    WITH input AS MATERIALIZED (  -- materialized: each field is taken out of its item once, not once per rule
        SELECT i.ord, jsonb_typeof(i.item) AS item_type, i.item->'message' AS message, i.item->'to' AS to_,
               i.item->'idempotency_key' AS key_json, i.item->'correlation_id' AS correlation_json,
               i.item->'phone_number_id' AS sender_json
        FROM jsonb_array_elements(items) WITH ORDINALITY AS i(item, ord)
    ), checked AS (
        SELECT ord, recipient, sender,
               CASE WHEN message ?| '{to,messaging_product,recipient_type}'
                    THEN message - '{to,messaging_product,recipient_type}'::text[]
                    ELSE message END AS body,  -- copy the jsonb only when there is something to strip
               key_json #>> '{}' AS key, correlation_json #>> '{}' AS correlation_id,
               nextval(v_sequence) AS new_id,
               CASE
                   WHEN item_type <> 'object' THEN 'must be an object'
                   WHEN recipient IS NULL THEN wa_outbox.recipient_problem(to_)
                   ELSE coalesce(
                       wa_outbox.message_form_problem(message),
                       CASE WHEN v_json_suspect THEN wa_outbox.message_json_problem(message) END,
                       wa_outbox.key_problem('idempotency_key', key_json),
                       wa_outbox.key_problem('correlation_id', correlation_json),
                       CASE WHEN jsonb_typeof(sender_json) NOT IN ('string', 'null')
                                 OR sender_json #>> '{}' !~ '^[0-9]{1,32}$'
                                THEN '`phone_number_id` must be the numeric id of a business phone number'
                            -- An item's own sender passed the rule above; the default's verdict is known already.
                            WHEN sender IS NULL OR (sender_json #>> '{}' IS NULL AND NOT v_default_ok)
                                THEN 'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox'
                       END)
               END AS problem
        FROM (SELECT *, CASE WHEN jsonb_typeof(to_) = 'string' THEN wa_outbox.recipient_digits(to_ #>> '{}') END
                            AS recipient,
                     coalesce(sender_json #>> '{}', v_default) AS sender
              FROM input) input
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
    SELECT array_agg(new_id ORDER BY ord), array_agg(key ORDER BY ord), array_agg(request_hash ORDER BY ord),
           bool_or(key IS NOT NULL)
    INTO v_new, v_keys, v_hashes, v_keyed
    FROM hashed;

    IF v_keyed THEN
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
    ELSE
        v_ids := v_new;
    END IF;
    PERFORM pg_notify('wa_outbox_notifications', '');
    RETURN coalesce(v_ids, '{}');
END $$;

-- enqueue_campaign() as in version 3, with the same savings as enqueue_many() (and its work_mem).
CREATE OR REPLACE FUNCTION wa_outbox.enqueue_campaign(campaign_name text, phone_number_id text, items jsonb,
                                           default_sender text DEFAULT NULL)
    RETURNS TABLE (campaign_id bigint, campaign_status text, inserted integer, present integer)
    LANGUAGE plpgsql SET work_mem = '64MB' AS $$
#variable_conflict use_column
DECLARE
    v_sender text := coalesce(enqueue_campaign.phone_number_id, default_sender,
                              (SELECT s.value FROM wa_outbox.settings s WHERE s.key = 'default_phone_number_id'));
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
    v_campaign wa_outbox.campaigns%ROWTYPE;
    v_json_suspect boolean;
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
    v_json_suspect := wa_outbox.batch_json_suspect(items);

    WITH input AS MATERIALIZED (  -- materialized: each field is taken out of its item once, not once per rule
        SELECT i.ord, jsonb_typeof(i.item) AS item_type, i.item->'message' AS message, i.item->'to' AS to_,
               i.item->'idempotency_key' AS key_json,
               CASE WHEN jsonb_typeof(i.item->'to') = 'string' THEN wa_outbox.recipient_digits(i.item->>'to') END
                   AS recipient
        FROM jsonb_array_elements(items) WITH ORDINALITY AS i(item, ord)
    ), checked AS (
        SELECT ord, recipient,
               CASE WHEN message ?| '{to,messaging_product,recipient_type}'
                    THEN message - '{to,messaging_product,recipient_type}'::text[]
                    ELSE message END AS body,
               key_json #>> '{}' AS key,
               CASE
                   WHEN item_type <> 'object' THEN 'must be an object'
                   WHEN recipient IS NULL THEN wa_outbox.recipient_problem(to_)
                   WHEN jsonb_typeof(key_json) IS DISTINCT FROM 'string'
                       THEN 'a campaign message needs its idempotency_key'
                   ELSE coalesce(wa_outbox.message_form_problem(message),
                                 CASE WHEN v_json_suspect THEN wa_outbox.message_json_problem(message) END,
                                 wa_outbox.key_problem('idempotency_key', key_json))
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

-- == History and retention =========================================================================================
-- prune: no index. `wa-outbox prune` walks each table's primary key over the ids created before its cutoff (found by
-- bisecting the key, as ids grow with time) and filters status and age on the rows it reads, so it never needs an
-- index of old finished rows: such an index would cover nearly all of history and cost one more entry on every
-- status change of every message, on the send path, for a job that runs once a day.

-- == Webhook ingest ================================================================================================

-- == Claim and record ==============================================================================================
SELECT 1;
