-- wa-outbox schema, version 3: pacing that never trips Meta's limits, per-recipient order, campaigns, and what the
-- operator's tools (ops page, metrics from the workers) read. Each engineer's part has its own section.

-- == Campaigns: the shared shape (claim order and campaign steering both read it) ==================================
-- A campaign is a named set of messages an operator imports and steers as one (wa-outbox campaign …).
CREATE TABLE wa_outbox.campaigns (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    phone_number_id  text NOT NULL,
    status           text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'cancelled')),
    pause_reason     text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT campaigns_name UNIQUE (name)
);
-- A message's campaign (NULL: a transactional message). No foreign key: the check would cost a look-up per row of
-- a bulk import; campaigns are never deleted while they have messages.
ALTER TABLE wa_outbox.notifications ADD COLUMN campaign_id bigint;
-- Claim order: lower first. Transactional messages (0) go before campaign messages (1) when both wait, so a 50,000-row
-- campaign never delays an order confirmation.
ALTER TABLE wa_outbox.notifications ADD COLUMN priority smallint NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 9);
CREATE INDEX notifications_campaign ON wa_outbox.notifications (campaign_id, status) WHERE campaign_id IS NOT NULL;

-- == Pacing per sender =============================================================================================

-- == Per recipient: pacing, order, the service window ============================================================
-- Order: messages to one recipient from one sender go out in the order they were enqueued (by id), one at a time.
-- Only the head of each (sender, recipient) line is claimable; a follower the claim finds is parked (`blocked`)
-- out of the due index, and the statement that finishes the head (sent, dead, cancelled) releases the next one
-- (wa_outbox.next_in_line). So the claim stays O(batch) however many messages wait behind one recipient.
-- ordered = false opts a message out: it neither waits nor makes others wait.
ALTER TABLE wa_outbox.notifications ADD COLUMN ordered boolean NOT NULL DEFAULT true;
ALTER TABLE wa_outbox.notifications ADD COLUMN blocked boolean NOT NULL DEFAULT false;
-- The unfinished ordered messages of each line, by id: "is anything earlier still to go?" and "who is next?" are one
-- index probe each.
CREATE INDEX notifications_line ON wa_outbox.notifications (phone_number_id, recipient, id)
    WHERE ordered AND status IN ('queued', 'sending', 'unknown');
-- Parked followers (a handful of lines at any time), for the sweep that releases a line whose release was missed.
CREATE INDEX notifications_blocked ON wa_outbox.notifications (phone_number_id, recipient, id)
    WHERE blocked AND status = 'queued';
-- Priority: the claim takes due rows by (priority, next_attempt_at); parked followers are not in the index.
DROP INDEX wa_outbox.notifications_due;
CREATE INDEX notifications_due ON wa_outbox.notifications (priority, next_attempt_at)
    WHERE status = 'queued' AND NOT blocked;

-- Pair pacing: a generic cell rate algorithm per (sender, recipient). pair_paced_until is the time the pair's
-- budget is spent up to; a send is allowed while it is at most (burst - 1) intervals ahead of now, and pushes it one
-- interval further (WA_OUTBOX_PAIR_RATE_SECONDS, WA_OUTBOX_PAIR_BURST).
ALTER TABLE wa_outbox.contacts ADD COLUMN pair_paced_until timestamptz;

-- next_in_line(): the order rule's one helper. Every statement that moves messages out of queued / sending /
-- unknown (to sent, delivered, read, failed, dead, cancelled) must release the next parked message of each line
-- those messages were in, in the same statement:
--     released AS (
--         UPDATE wa_outbox.notifications n
--         SET blocked = false, next_attempt_at = greatest(n.next_attempt_at, now()), updated_at = now()
--         WHERE n.id IN (SELECT wa_outbox.next_in_line(ARRAY(SELECT id FROM finished)))
--           AND n.blocked AND n.status = 'queued')
-- `finished` are the ids the statement finished (any, ordered or not): they are excluded, as the statement's own
-- snapshot still shows them unfinished. Returns, per line, its first unfinished message when that one is parked.
-- A release missed (a race with a claim parking a follower at the same moment) is made by the sweep,
-- release_stalled_lines.sql, within seconds.
CREATE FUNCTION wa_outbox.next_in_line(finished bigint[]) RETURNS SETOF bigint LANGUAGE sql STABLE AS $$
    SELECT head.id
    FROM (SELECT DISTINCT n.phone_number_id, n.recipient FROM wa_outbox.notifications n
          WHERE n.id = ANY (finished) AND n.ordered) line,
         LATERAL (SELECT h.id, h.blocked FROM wa_outbox.notifications h
                  WHERE h.phone_number_id = line.phone_number_id AND h.recipient = line.recipient AND h.ordered
                    AND h.status IN ('queued', 'sending', 'unknown') AND h.id <> ALL (finished)
                  ORDER BY h.id LIMIT 1) head
    WHERE head.blocked
$$;

-- enqueue() as in 0002, plus `ordered` (default true: wait for earlier messages to the same recipient). One
-- function with every parameter defaulted after `message`, so every existing call (positional or named) still works.
DROP FUNCTION wa_outbox.enqueue(text, jsonb, text, text, text);
CREATE FUNCTION wa_outbox.enqueue(
    to_ text,
    message jsonb,
    idempotency_key text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    phone_number_id text DEFAULT NULL,
    ordered boolean DEFAULT true
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
        (phone_number_id, recipient, message, idempotency_key, request_hash, correlation_id, ordered)
    VALUES (v_sender, v_recipient, v_body, enqueue.idempotency_key, v_hash, enqueue.correlation_id,
            coalesce(enqueue.ordered, true))
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


-- == Campaigns: steering ===========================================================================================

-- == Metrics from the workers ======================================================================================

-- == Ops page ======================================================================================================

