-- Undo version 5, in reverse order of its sections.

-- == Pacing ===========================================================================================================

DROP FUNCTION wa_outbox.return_pair_reservations(bigint[], text, double precision);

-- == Webhook ingest ===================================================================================================
ALTER TABLE wa_outbox.webhook_events ALTER COLUMN dedup_key TYPE text;  -- the database's collation again
DROP INDEX wa_outbox.webhook_events_wamid;
CREATE INDEX webhook_events_wamid ON wa_outbox.webhook_events (wamid) WHERE wamid IS NOT NULL;

-- == Bulk enqueue =====================================================================================================
DROP FUNCTION wa_outbox.enqueue_checked(jsonb);
-- enqueue_many() as version 4 defined it (0004_scale.up.sql).
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

-- == Claim and record =================================================================================================

DROP FUNCTION wa_outbox.reserve_slots_ahead(text, integer, double precision, double precision, double precision,
                                            integer, timestamptz);
-- Version 4's reserve_slots(), exactly.
CREATE OR REPLACE FUNCTION wa_outbox.reserve_slots(sender text, wanted integer, default_mps double precision,
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

-- == Ops queries ======================================================================================================
-- Version 4's timeline index and dead-letter index (as version 3 made them), view, and no index of the queue's age.
DROP INDEX wa_outbox.notification_events_created_at;
CREATE INDEX notification_events_created_at ON wa_outbox.notification_events USING brin (created_at)
    WITH (autosummarize = on);
DROP INDEX wa_outbox.notifications_dead_code;
CREATE INDEX notifications_dead_code ON wa_outbox.notifications ((coalesce(last_error ->> 'code', '')), id)
    WHERE status = 'dead';
CREATE OR REPLACE VIEW wa_outbox.queue_health AS
SELECT 'notifications'::text AS queue, 'queued'::text AS status, sum(q.rows)::bigint AS rows,
       min(q.oldest_due) AS oldest_due, extract(epoch FROM now() - min(q.oldest)) AS oldest_age_seconds
FROM (  -- due or waiting (notifications_due), and parked behind an earlier message (notifications_blocked)
    SELECT count(*) AS rows, min(next_attempt_at) AS oldest_due, min(created_at) AS oldest
    FROM wa_outbox.notifications WHERE status = 'queued' AND NOT blocked
    UNION ALL
    SELECT count(*), min(next_attempt_at), min(created_at)
    FROM wa_outbox.notifications WHERE status = 'queued' AND blocked
) q
HAVING sum(q.rows) > 0
UNION ALL
SELECT 'notifications', 'sending', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'sending' HAVING count(*) > 0
UNION ALL
SELECT 'notifications', 'unknown', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'unknown' HAVING count(*) > 0
UNION ALL
SELECT 'notifications', 'dead', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'dead' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'queued', count(*), min(next_attempt_at), extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'queued' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'processing', count(*), NULL, extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'processing' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'dead', count(*), NULL, extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'dead' HAVING count(*) > 0;
DROP INDEX wa_outbox.notifications_queued_age;

-- == History flatness =================================================================================================
-- Version 4's definitions: the default fill factor (pages already written keep their layout: no rewrite).
ALTER TABLE wa_outbox.contacts RESET (fillfactor);
ALTER TABLE wa_outbox.notifications RESET (fillfactor);

SELECT 1;
