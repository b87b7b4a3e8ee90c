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
-- The bucket's shape. The operator configures `mps`, the most a sender may send in any one-second window (Meta
-- answers 130429 beyond it). A token bucket of refill rate R and capacity B grants at most B + R*L in any window of
-- length L, so a bucket that refills at `mps` with one second of burst (what version 1 did) saw 27-33 sends in a
-- second at a limit of 20. By default (burst NULL) the bucket refills a little slower than the limit and holds
-- barely more than one token:
--   R = mps * (1 - 0.015)         98.5 % of the limit, the rate a busy sender actually reaches;
--   B = 1 + R * 0.005             one token, plus 5 ms of refill: a claim up to 5 ms late loses nothing.
-- Then B + R * (1 + J) < mps + 1 for any J (delay between grant and arrival at Meta, varying by send) up to ~10 ms,
-- so no window of one second at Meta's end ever holds more than `mps` sends: (1 + 0.005 + J) * 0.985 < 1.
-- An explicit burst (`wa-outbox ratelimit set --burst B`) is the classic bucket for those who want bursts: refill at
-- `mps`, capacity B, so a one-second window may hold up to B + mps sends.
CREATE FUNCTION wa_outbox.bucket_shape(mps double precision, burst double precision,
                                       OUT refill double precision, OUT capacity double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NULL THEN mps * (1 - 0.015) ELSE mps END,
           CASE WHEN burst IS NULL THEN 1 + mps * (1 - 0.015) * 0.005 ELSE burst END
$$;
ALTER TABLE wa_outbox.rate_limits ALTER COLUMN burst DROP NOT NULL;
-- Buckets created with version 1's default burst (one second of tokens) get the default pacing.
UPDATE wa_outbox.rate_limits SET burst = NULL WHERE burst = greatest(1, mps);
COMMENT ON COLUMN wa_outbox.rate_limits.burst IS
    'NULL: the default pacing (never more than mps in any one-second window); a number: a classic bucket of that size';

-- take_tokens(): the shared token bucket, shaped by bucket_shape(). Grants up to `wanted` sends for a sender now
-- (0 while it is paused) and says when the next token will be there and at what rate the following ones come (the
-- claim spaces the rows it could not grant by that rate); creates the bucket at the default rate on first use. The
-- row lock makes concurrent workers on any number of machines share one rate.
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

-- Messages Meta reported `failed` belong to the dead-letter queue (dlq list, /v1/dead) with the dead ones: one
-- partial index serves its newest-first pages.
CREATE INDEX notifications_dead_or_failed ON wa_outbox.notifications (id) WHERE status IN ('dead', 'failed');
-- It serves what notifications_dead (dead rows by id, version 2) served too: one index, not two.
DROP INDEX wa_outbox.notifications_dead;

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
-- Bulk import of one campaign's chunk (wa-outbox campaign import): in one statement, find or create the campaign by
-- name, refuse a cancelled one, and insert the chunk's messages with the campaign's id, priority 1 and the
-- campaign's sender. Each item is {"to", "message", "idempotency_key"} (the key derived from the campaign name and
-- the row), validated by the same functions as enqueue_many; a known key inserts nothing (a re-import). Messages of
-- a paused campaign are parked (next_attempt_at = 'infinity') until `campaign resume`.
-- A new campaign's sender: phone_number_id, else default_sender (the caller's WHATSAPP_PHONE_NUMBER_ID), else the
-- one `db upgrade` recorded; an existing campaign keeps its own, and naming another is refused.
CREATE FUNCTION wa_outbox.enqueue_campaign(campaign_name text, phone_number_id text, items jsonb,
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

-- Steer a campaign: 'pause' parks its queued and in-flight messages (next_attempt_at = 'infinity': out of the due
-- queue, attempts untouched), 'resume' brings them back (now()), 'cancel' makes every still-queued one `cancelled`
-- with a timeline event naming who asked. Set-based, one UPDATE per step. The campaign row is updated first (it waits
-- for an import chunk holding it), and the messages are moved by a later statement, whose snapshot sees that chunk.
-- Raises no_data_found for an unknown campaign, object_not_in_prerequisite_state for pausing or resuming a cancelled
-- one. A second run changes nothing more (moved = 0).
CREATE FUNCTION wa_outbox.steer_campaign(campaign_name text, action text, actor text, reason text DEFAULT NULL)
    RETURNS TABLE (campaign_id bigint, name text, status text, previous_status text, moved bigint)
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_id bigint;
    v_previous text;
    v_moved bigint;
BEGIN
    SELECT c.id, c.status INTO v_id, v_previous FROM wa_outbox.campaigns c WHERE c.name = campaign_name FOR UPDATE;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'no campaign %', campaign_name USING ERRCODE = 'no_data_found';
    END IF;
    IF action IN ('pause', 'resume') AND v_previous = 'cancelled' THEN
        RAISE EXCEPTION 'campaign % is cancelled: it cannot be %', campaign_name,
            CASE action WHEN 'pause' THEN 'paused' ELSE 'resumed' END USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF action = 'pause' THEN
        UPDATE wa_outbox.campaigns c
        SET status = 'paused', pause_reason = CASE WHEN c.status = 'paused' THEN c.pause_reason ELSE reason END,
            updated_at = now()
        WHERE c.id = v_id;
        UPDATE wa_outbox.notifications n SET next_attempt_at = 'infinity', updated_at = now()
        WHERE n.campaign_id = v_id AND n.status IN ('queued', 'sending') AND n.next_attempt_at <> 'infinity';
        GET DIAGNOSTICS v_moved = ROW_COUNT;
    ELSIF action = 'resume' THEN
        UPDATE wa_outbox.campaigns c SET status = 'active', pause_reason = NULL, updated_at = now() WHERE c.id = v_id;
        UPDATE wa_outbox.notifications n SET next_attempt_at = now(), updated_at = now()
        WHERE n.campaign_id = v_id AND n.status IN ('queued', 'sending') AND n.next_attempt_at = 'infinity';
        GET DIAGNOSTICS v_moved = ROW_COUNT;
        IF v_moved > 0 THEN
            PERFORM pg_notify('wa_outbox_notifications', '');
        END IF;
    ELSIF action = 'cancel' THEN
        UPDATE wa_outbox.campaigns c SET status = 'cancelled', pause_reason = NULL, updated_at = now()
        WHERE c.id = v_id;
        WITH cancelled AS (
            UPDATE wa_outbox.notifications n SET status = 'cancelled', updated_at = now()
            WHERE n.campaign_id = v_id AND n.status = 'queued'
            RETURNING n.id, n.attempts, n.correlation_id
        ), events AS (
            INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail, correlation_id)
            SELECT id, 'cancelled', attempts, jsonb_build_object('by', actor, 'campaign', campaign_name),
                   correlation_id
            FROM cancelled
        )
        SELECT count(*) INTO v_moved FROM cancelled;
    ELSE
        RAISE EXCEPTION 'unknown campaign action %', action USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY SELECT c.id, c.name, c.status, v_previous, v_moved FROM wa_outbox.campaigns c WHERE c.id = v_id;
END $$;

-- A campaign message that goes back to `queued` (a retry, a rescued lease, a resend, a requeue) while its campaign is
-- paused or cancelled, or that `campaign pause` parked while it was in flight, stays parked: pausing never loses a
-- message in flight, and none of them slips past the pause. The WHEN clause keeps transactional rows (campaign_id
-- NULL) and every other transition from calling the function at all.
CREATE FUNCTION wa_outbox.park_paused_campaign_message() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.next_attempt_at = 'infinity'
       OR EXISTS (SELECT 1 FROM wa_outbox.campaigns c WHERE c.id = NEW.campaign_id AND c.status <> 'active') THEN
        NEW.next_attempt_at := 'infinity';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER notifications_park_paused_campaign
    BEFORE UPDATE OF status ON wa_outbox.notifications
    FOR EACH ROW WHEN (NEW.campaign_id IS NOT NULL AND NEW.status = 'queued' AND OLD.status <> 'queued')
    EXECUTE FUNCTION wa_outbox.park_paused_campaign_message();


-- == Metrics from the workers ======================================================================================
-- Each worker's cumulative counters and latency buckets (wa_outbox/metrics.py), written with its heartbeat and summed
-- over all workers by /metrics: a worker dyno cannot be scraped. A worker's values only grow while it runs; when it
-- stops cleanly, or after a day without writing (killed), its rows are added into the rows of worker_id 'retired'
-- and deleted (retire_worker_metrics.sql), so the sums never go backwards across restarts.
CREATE TABLE wa_outbox.worker_metrics (
    worker_id   text NOT NULL,
    metric      text NOT NULL,
    labels      jsonb NOT NULL DEFAULT '{}',
    value       double precision NOT NULL CHECK (value >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (worker_id, metric, labels)
);
-- The retirement of rows no worker wrote for a day.
CREATE INDEX worker_metrics_updated_at ON wa_outbox.worker_metrics (updated_at);

-- == Ops page ======================================================================================================
-- Throughput per minute over the last hour reads the timeline's last hour only. The timeline is append-only, so
-- created_at follows the physical order of its rows: a BRIN index (a few pages for millions of events, next to
-- nothing per insert) finds the last hour's pages without a new B-tree entry per event on the send path.
CREATE INDEX notification_events_created_at ON wa_outbox.notification_events USING brin (created_at)
    WITH (autosummarize = on);
-- The dead-letter queue grouped by error code, and each group's newest samples: only dead rows are in it.
-- ('' is "no code", so one equality serves every group.)
CREATE INDEX notifications_dead_code ON wa_outbox.notifications ((coalesce(last_error ->> 'code', '')), id)
    WHERE status = 'dead';

