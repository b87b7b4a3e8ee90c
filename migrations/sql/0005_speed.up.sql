-- Version 5: speed. One section per concern; each section's undo is in 0005_speed.down.sql, in reverse order.

-- == History flatness =================================================================================================
-- Claim + record cost per message must not grow with finished history (bench/history.py).
--
-- notifications: every page keeps 10 % free. A new message then never lands in the few bytes left on an old
-- history page (the free space map offers those holes to every INSERT: with 10 M messages of history, a claim read
-- and dirtied one cold page per such message), and the new versions its claim, record and status updates write
-- stay on its own page. Only new pages are filled this way: no rewrite, no lock beyond a moment's.
ALTER TABLE wa_outbox.notifications SET (fillfactor = 90);
-- contacts: each claim moves its recipients' pair_paced_until. With room on the row's page that update is HOT: no
-- new contacts_pkey entry (a cold index leaf dirtied, and split, per message) and no second heap page. The table is
-- rewritten once so that existing pages have that room (it locks contacts while it runs, a few seconds per million
-- contacts: README, Deploy). CLUSTER rather than VACUUM FULL, which cannot run in the migration's transaction; SET
-- WITHOUT CLUSTER: nothing should re-cluster it later.
ALTER TABLE wa_outbox.contacts SET (fillfactor = 80);
CLUSTER wa_outbox.contacts USING contacts_pkey;
ALTER TABLE wa_outbox.contacts SET WITHOUT CLUSTER;

-- == Ops queries ======================================================================================================
-- The /metrics scrape (queue_metrics.sql) and the queue_health view count and age the waiting queue from an index
-- alone: the view's queued branch read one heap row per queued message for its oldest created_at and due time
-- (100,000 queued: ~0.2-0.6 s). One entry per queued row (blocked or not); a row gets one when it is enqueued or
-- put back in the queue, none when it is claimed or finishes. An index-only scan skips the heap only for pages
-- VACUUM has marked all-visible (the visibility map); on pages it has not, it reads the row as before.
CREATE INDEX notifications_queued_age ON wa_outbox.notifications (created_at) INCLUDE (next_attempt_at)
    WHERE status = 'queued';
CREATE OR REPLACE VIEW wa_outbox.queue_health AS
SELECT 'notifications'::text AS queue, 'queued'::text AS status, count(*) AS rows,
       min(next_attempt_at) AS oldest_due, extract(epoch FROM now() - min(created_at)) AS oldest_age_seconds
FROM wa_outbox.notifications WHERE status = 'queued' HAVING count(*) > 0  -- notifications_queued_age alone
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
-- The ops page's dead-letter groups (ops_dead_groups.sql) counted from the index alone: the planner takes an
-- index-only scan of an expression index only when the expression's column is in the index too (INCLUDE), else it
-- read each dead row from the heap (100,000 dead: ~0.4 s). Dead rows only, which are few and change seldom.
DROP INDEX wa_outbox.notifications_dead_code;
CREATE INDEX notifications_dead_code ON wa_outbox.notifications ((coalesce(last_error ->> 'code', '')), id)
    INCLUDE (last_error) WHERE status = 'dead';
-- The ops page's charts (ops_throughput.sql) find the timeline's last hour through its BRIN index on created_at, in
-- ranges of 16 pages instead of the default 128. Not every new event lands at the table's end: a small one fits in
-- the free space of an old page (what a full page had left over, what prune frees), and that range's summary then
-- reaches now, so the whole range is read for that one row. On 10 million messages with 100,000 queued, the hour's
-- 108,000 events came with 524,000 others read and thrown away in 128-page ranges, 72,000 in 16-page ones. Still a
-- BRIN index (no B-tree entry per event on the send path), of 8 times as many summaries: 770 kB at 10 million.
DROP INDEX wa_outbox.notification_events_created_at;
CREATE INDEX notification_events_created_at ON wa_outbox.notification_events USING brin (created_at)
    WITH (pages_per_range = 16, autosummarize = on);

-- == Claim and record =================================================================================================

-- Slots reserved ahead, in a transaction of their own. reserve_slots() in the claim held the sender's rate_limits row
-- lock through the rest of the claim and its commit's WAL flush, so the claims of every worker for one sender ran one
-- at a time (docs/drain-profile.md). A worker now reserves the slots of the senders it claimed for last time just
-- before its claim (reserve_slots_ahead.sql, a short statement committed at once) and hands the grant to the claim,
-- which then takes no lock on rate_limits for them. Slots reserved but not used (the claim found fewer rows) are lost
-- capacity, never a rate violation; they come back (`unused`) only while they are still the end of the sender's
-- schedule, i.e. no one reserved a slot since (`reserved_at`, the refilled_at this worker's reservation left): then the
-- schedule is exactly as if they had never been reserved.

-- reserve_slots() as in version 4, except that a reservation granting nothing writes nothing: the state it wrote
-- (tokens = level, refilled_at = t; level is below one then, never capped) described the same schedule, but moved
-- refilled_at, which identifies the last reservation for reserve_slots_ahead's refund: a worker whose grant was empty
-- no longer spoils the refund of one that got slots.
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
    IF granted > 0 THEN  -- an empty grant leaves the schedule as it was (see reserve_slots_ahead)
        UPDATE wa_outbox.rate_limits r SET tokens = level - granted, refilled_at = t WHERE r.phone_number_id = sender;
    END IF;
END $$;

CREATE FUNCTION wa_outbox.reserve_slots_ahead(sender text, wanted integer, default_mps double precision,
                                              lead double precision, horizon double precision,
                                              unused integer, reserved_at timestamptz,
                                              OUT granted integer, OUT slots_from timestamptz, OUT level double precision,
                                              OUT refill double precision, OUT paused boolean)
LANGUAGE plpgsql AS $$
BEGIN
    IF unused > 0 THEN
        UPDATE wa_outbox.rate_limits r SET tokens = r.tokens + unused
        WHERE r.phone_number_id = sender AND r.refilled_at = reserved_at
          AND (r.paused_until IS NULL OR r.paused_until <= now());
    END IF;
    SELECT g.granted, g.slots_from, g.level, g.refill, g.paused INTO granted, slots_from, level, refill, paused
    FROM wa_outbox.reserve_slots(sender, wanted, default_mps, lead, horizon) g;
END $$;

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
-- Every stored update entered webhook_events_wamid, but its only reader (settle_unknown.sql) looks up status events
-- that are not done: partial on those, an inbound message never enters it and a processed status's new row version
-- does not either, so the hot INSERT writes one index entry fewer per message and the index stays small. Rebuilding it
-- locks the table against writes for the time it takes (README, Deploy).
DROP INDEX wa_outbox.webhook_events_wamid;
CREATE INDEX webhook_events_wamid ON wa_outbox.webhook_events (wamid) WHERE kind = 'status' AND status <> 'done';
-- Dedup keys compared byte by byte: every stored update probes and enters the unique index on dedup_key, and under the
-- database's collation each comparison was a strcoll() (slow under the usual en_US.UTF-8). A key is only ever matched
-- for equality (and sorted for lock order), so the order does not matter; equality is the same under every
-- deterministic collation. Same type, so the table is not rewritten: only that index is rebuilt (locking the table).
ALTER TABLE wa_outbox.webhook_events ALTER COLUMN dedup_key TYPE text COLLATE "C";

-- == Pacing ===========================================================================================================

-- Give back the pair-pacing reservations (contacts.pair_paced_until, a generic cell rate algorithm: each claim moves
-- it one interval per message) of claimed rows that go back unsent (given back before their send slot): the
-- recipient is then not held back by a send that never happened. Called by the worker before it records the rows
-- as released, while they are still `sending` under its lease (so none can be claimed again meanwhile); rows that
-- are not are skipped. Returns how many reservations were given back.
--
-- Safe only while no other claim for that recipient came after: each claim sets the time to
-- greatest(time, its now()) + k intervals, so taking back k intervals restores what the time would have been
-- without this claim (or later: never earlier) as long as the claims since were this one's statement (same now(),
-- same updated_at on its rows) or given back too. A message to the recipient updated after the claim (claimed later,
-- or anything else: it then keeps its reservation, the safe side) means no give-back. The recipients' rows are
-- locked first, in key order as the claim locks them, and checked in a second statement: its snapshot sees every
-- claim that moved the time before the lock was taken.
CREATE FUNCTION wa_outbox.return_pair_reservations(p_ids bigint[], p_worker text, p_interval double precision)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    returned integer;
BEGIN
    IF p_interval <= 0 THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM wa_outbox.contacts c
    WHERE (c.phone_number_id, c.wa_id) IN (SELECT n.phone_number_id, n.recipient FROM wa_outbox.notifications n
                                           WHERE n.id = ANY (p_ids) AND n.status = 'sending'
                                             AND n.locked_by = p_worker)
    ORDER BY c.phone_number_id, c.wa_id
    FOR UPDATE OF c;
    WITH given AS (
        SELECT n.phone_number_id, n.recipient, count(*) AS k, min(n.updated_at) AS claimed_at
        FROM wa_outbox.notifications n
        WHERE n.id = ANY (p_ids) AND n.status = 'sending' AND n.locked_by = p_worker
        GROUP BY n.phone_number_id, n.recipient
    ), back AS (
        UPDATE wa_outbox.contacts c
        SET pair_paced_until = c.pair_paced_until - make_interval(secs => g.k * p_interval)
        FROM given g
        WHERE c.phone_number_id = g.phone_number_id AND c.wa_id = g.recipient AND c.pair_paced_until IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM wa_outbox.notifications m
                          WHERE m.recipient = g.recipient AND m.phone_number_id = g.phone_number_id
                            AND m.updated_at > g.claimed_at AND NOT (m.id = ANY (p_ids)))
        RETURNING g.k
    )
    SELECT coalesce(sum(k), 0) INTO returned FROM back;
    RETURN returned;
END
$$;

SELECT 1;
