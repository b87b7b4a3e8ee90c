-- Version 5: speed. One section per concern; each section's undo is in 0005_speed.down.sql, in reverse order.

-- == History flatness =================================================================================================

-- == Ops queries ======================================================================================================

-- == Claim and record =================================================================================================

-- == Bulk enqueue =====================================================================================================
-- enqueue_many() as in version 4, with its rows written by two inserts in the same statement: items with an
-- idempotency key through INSERT ... ON CONFLICT, the others through a plain INSERT. ON CONFLICT inserts every row
-- speculatively (a lock taken and released, one more WAL record, per row): 8 % of a batch without keys, which
-- has no key to conflict on. An invalid item (the first, in input order) now aborts the statement before either
-- insert writes a row: the `refused` step, which both inserts wait for.
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
    ), refused AS MATERIALIZED (
        -- The first invalid item raises here (materialized: its row is computed whatever reads it). Both inserts
        -- read this step first, so nothing is written before it.
        SELECT wa_outbox.refuse_item(ord, problem) AS refusal
        FROM (SELECT ord, problem FROM hashed WHERE problem IS NOT NULL ORDER BY ord LIMIT 1) first_invalid
    ), keyed AS (
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id)
        OVERRIDING SYSTEM VALUE
        SELECT new_id, sender, recipient, body, key, request_hash, correlation_id
        FROM hashed WHERE key IS NOT NULL AND NOT EXISTS (SELECT FROM refused WHERE refusal IS NOT NULL)
        ORDER BY ord  -- of two items with one key, the first goes in
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id, correlation_id
    ), unkeyed AS (
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id)
        OVERRIDING SYSTEM VALUE
        SELECT new_id, sender, recipient, body, NULL, request_hash, correlation_id
        FROM hashed WHERE key IS NULL AND NOT EXISTS (SELECT FROM refused WHERE refusal IS NOT NULL)
        RETURNING id, correlation_id
    ), events AS (
        INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, correlation_id)
        SELECT id, 'queued', 0, correlation_id FROM keyed
        UNION ALL
        SELECT id, 'queued', 0, correlation_id FROM unkeyed
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

-- enqueue_checked(): enqueue_many()'s writes alone, for items the Python package has checked already (wa_outbox/
-- enqueue.py's enqueue_many(): every rule of wa_outbox.messages, which gives the verdicts the SQL rules give, case for
-- case: tests/test_validation.py). Checking them again in SQL was a third of Postgres's CPU per message (each rule
-- per item, the walks over the batch, taking each field out of its item); here jsonb_to_recordset() reads every
-- item's fields in one step. Each item: {"to": <digits>, "message": <object>, "idempotency_key"?, "correlation_id"?,
-- "phone_number_id"?}. The one rule Python cannot know, the default sender (from settings), is checked here; the
-- table's own checks still hold. SQL callers use enqueue_many(), which checks everything.
CREATE FUNCTION wa_outbox.enqueue_checked(items jsonb) RETURNS bigint[] LANGUAGE plpgsql
    SET work_mem = '64MB' AS $$
DECLARE
    v_default text := (SELECT s.value FROM wa_outbox.settings s WHERE s.key = 'default_phone_number_id');
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
    v_missing bigint;
    v_new bigint[];
    v_keys text[];
    v_hashes text[];
    v_keyed boolean;
    v_ids bigint[];
    v_conflict boolean;
BEGIN
    IF v_default IS NULL OR v_default !~ '^[0-9]{1,32}$' THEN
        -- No usable default: the first item without its own sender refuses the batch (enqueue_many()'s last rule).
        SELECT i.ord INTO v_missing FROM jsonb_array_elements(items) WITH ORDINALITY AS i(item, ord)
        WHERE i.item->>'phone_number_id' IS NULL ORDER BY i.ord LIMIT 1;
        IF v_missing IS NOT NULL THEN
            PERFORM wa_outbox.refuse_item(v_missing,
                'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox');
        END IF;
    END IF;
    WITH input AS (
        SELECT i.ord, i."to" AS recipient, coalesce(i.phone_number_id, v_default) AS sender,
               CASE WHEN i.message ?| '{to,messaging_product,recipient_type}'
                    THEN i.message - '{to,messaging_product,recipient_type}'::text[]
                    ELSE i.message END AS body,  -- copy the jsonb only when there is something to strip
               i.idempotency_key AS key, i.correlation_id, nextval(v_sequence) AS new_id
        FROM ROWS FROM (jsonb_to_recordset(items) AS ("to" text, message jsonb, idempotency_key text,
                                                      correlation_id text, phone_number_id text))
             WITH ORDINALITY AS i("to", message, idempotency_key, correlation_id, phone_number_id, ord)
    ), hashed AS (
        -- The request digest only matters for an idempotency key (409 on reuse with another message).
        SELECT *, CASE WHEN key IS NULL THEN '' ELSE md5(sender || '|' || recipient || '|' || body::text) END
                  AS request_hash
        FROM input
    ), keyed AS (
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id)
        OVERRIDING SYSTEM VALUE
        SELECT new_id, sender, recipient, body, key, request_hash, correlation_id
        FROM hashed WHERE key IS NOT NULL
        ORDER BY ord  -- of two items with one key, the first goes in
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id, correlation_id
    ), unkeyed AS (  -- no key, nothing to conflict on: a plain insert (see enqueue_many())
        INSERT INTO wa_outbox.notifications
            (id, phone_number_id, recipient, message, request_hash, correlation_id)
        OVERRIDING SYSTEM VALUE
        SELECT new_id, sender, recipient, body, request_hash, correlation_id
        FROM hashed WHERE key IS NULL
        RETURNING id, correlation_id
    ), events AS (
        INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, correlation_id)
        SELECT id, 'queued', 0, correlation_id FROM keyed
        UNION ALL
        SELECT id, 'queued', 0, correlation_id FROM unkeyed
    )
    SELECT array_agg(new_id ORDER BY ord), array_agg(key ORDER BY ord), array_agg(request_hash ORDER BY ord),
           bool_or(key IS NOT NULL)
    INTO v_new, v_keys, v_hashes, v_keyed
    FROM hashed;

    IF v_keyed THEN
        -- As in enqueue_many(): a new snapshot sees the rows just inserted; a known key gives its stored id.
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

-- == Webhook ingest ===================================================================================================

-- == Pacing ===========================================================================================================

SELECT 1;
