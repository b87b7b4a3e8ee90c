-- wa-outbox schema, version 1: the whole data model (outbox, timeline, webhook events, contacts, rate limits, workers).
-- Everything lives in schema wa_outbox so it can sit beside the app's own tables in the app's database.

CREATE SCHEMA IF NOT EXISTS wa_outbox;

-- Service-wide settings written by wa-outbox processes at start-up (e.g. the default sender), read by SQL functions
-- such as enqueue() that cannot see the environment.
CREATE TABLE wa_outbox.settings (
    key         text PRIMARY KEY,
    value       text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The outbox: one row per outbound message.
CREATE TABLE wa_outbox.notifications (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    phone_number_id  text NOT NULL,                       -- the sender (business phone number id)
    recipient        text NOT NULL                        -- E.164 digits without '+', as Meta's wa_id
                     CHECK (recipient ~ '^[1-9][0-9]{6,14}$'),
    message          jsonb NOT NULL CHECK (jsonb_typeof(message) = 'object'),  -- Cloud API body, minus `to`
    idempotency_key  text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_hash     text NOT NULL,                       -- with a key: digest of (sender, recipient, message)
    status           text NOT NULL DEFAULT 'queued' CHECK (status IN
                     ('queued', 'sending', 'unknown', 'sent', 'delivered', 'read', 'failed', 'dead', 'cancelled')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     integer NOT NULL DEFAULT 10 CHECK (max_attempts > 0),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    locked_by        text,                                -- lease: the worker that claimed the row ...
    locked_until     timestamptz,                         -- ... and until when
    last_error       jsonb,                               -- {"code", "message", "details", "http_status", ...}
    wamid            text,                                -- the message id Meta returned
    correlation_id   text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz,
    delivered_at     timestamptz,
    read_at          timestamptz,
    unknown_since    timestamptz,                         -- when the outcome became ambiguous
    CHECK ((status = 'sending') = (locked_until IS NOT NULL))
);
CREATE UNIQUE INDEX notifications_idempotency_key ON wa_outbox.notifications (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX notifications_wamid ON wa_outbox.notifications (wamid) WHERE wamid IS NOT NULL;
-- The claim: due queued rows in order. Partial, so its size is the queue's, not the table's: claiming is O(batch).
CREATE INDEX notifications_due ON wa_outbox.notifications (next_attempt_at) WHERE status = 'queued';
-- The rescuer: expired leases.
CREATE INDEX notifications_leased ON wa_outbox.notifications (locked_until) WHERE status = 'sending';
-- Ambiguous sends waiting for a status webhook; the dead-letter queue.
CREATE INDEX notifications_unknown ON wa_outbox.notifications (unknown_since) WHERE status = 'unknown';
CREATE INDEX notifications_dead ON wa_outbox.notifications (updated_at) WHERE status = 'dead';
-- Support look-ups: by phone, by correlation id.
CREATE INDEX notifications_recipient ON wa_outbox.notifications (recipient, created_at DESC);
CREATE INDEX notifications_correlation_id ON wa_outbox.notifications (correlation_id)
    WHERE correlation_id IS NOT NULL;

-- The timeline: one row per transition, append-only.
CREATE TABLE wa_outbox.notification_events (
    id               bigint GENERATED ALWAYS AS IDENTITY,
    -- No foreign key: every event is written by the same statement that changes its message, and the check would
    -- cost a look-up per event on the hottest paths. Purge and prune delete a message's events with it.
    notification_id  bigint NOT NULL,
    event            text NOT NULL,   -- queued, sending, sent, retry_scheduled, unknown, reconciled, delivered, ...
    attempt          integer,
    detail           jsonb,           -- error detail, wamid, worker, policy applied ...
    correlation_id   text,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- One index serves every read (a message's timeline, in order) and costs one entry per event written.
    PRIMARY KEY (notification_id, id)
);

-- Postgres itself refuses UPDATE and DELETE on the timeline. Retention pruning (and the purge of dead-letter rows
-- with their events) opts in for its own transaction with: SET LOCAL wa_outbox.allow_prune = 'on'.
CREATE FUNCTION wa_outbox.refuse_timeline_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'TRUNCATE') AND current_setting('wa_outbox.allow_prune', true) = 'on' THEN
        RETURN OLD;  -- (NULL, and ignored, for TRUNCATE)
    END IF;
    RAISE EXCEPTION 'wa_outbox.notification_events is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'retention pruning sets wa_outbox.allow_prune = on for its transaction';
END $$;
CREATE TRIGGER notification_events_append_only
    BEFORE UPDATE OR DELETE ON wa_outbox.notification_events
    FOR EACH ROW EXECUTE FUNCTION wa_outbox.refuse_timeline_change();
CREATE TRIGGER notification_events_no_truncate
    BEFORE TRUNCATE ON wa_outbox.notification_events
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.refuse_timeline_change();

-- Inbound webhook changes: deduplicated by a stable key, and a queue the workers drain.
CREATE TABLE wa_outbox.webhook_events (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedup_key        text NOT NULL,   -- m:<wamid> | s:<wamid>:<status>[:<participant>] | d:<sha256 of the change>
    field            text NOT NULL,   -- Meta's change field: messages, calls, account_update, ...
    kind             text NOT NULL CHECK (kind IN ('message', 'status', 'change')),
    account_id       text,            -- entry[].id, the WhatsApp Business Account
    phone_number_id  text,            -- value.metadata.phone_number_id, when the change has one
    wamid            text,            -- messages and statuses
    update_status    text,            -- statuses: sent, delivered, read, failed, played
    payload          jsonb NOT NULL,  -- {"field", "value"} narrowed to this one message or status
    correlation_id   text,
    status           text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'processing', 'done', 'dead')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     integer NOT NULL DEFAULT 10 CHECK (max_attempts > 0),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    locked_by        text,
    locked_until     timestamptz,
    last_error       text,
    received_at      timestamptz NOT NULL DEFAULT now(),
    processed_at     timestamptz,
    CONSTRAINT webhook_events_dedup_key UNIQUE (dedup_key)
);
CREATE INDEX webhook_events_due ON wa_outbox.webhook_events (next_attempt_at) WHERE status = 'queued';
-- Queue tables churn: vacuum and analyze them after a few percent of changes, not the default 20 % / 10 %, so the
-- claim's index stays small and its plans stay right.
ALTER TABLE wa_outbox.notifications SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE wa_outbox.webhook_events SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
CREATE INDEX webhook_events_leased ON wa_outbox.webhook_events (locked_until) WHERE status = 'processing';
CREATE INDEX webhook_events_dead ON wa_outbox.webhook_events (received_at) WHERE status = 'dead';
CREATE INDEX webhook_events_wamid ON wa_outbox.webhook_events (wamid) WHERE wamid IS NOT NULL;
CREATE INDEX webhook_events_received_at ON wa_outbox.webhook_events (received_at);

-- Per (sender, customer): the 24-hour customer-service window and per-recipient pacing (the pair rate limit).
CREATE TABLE wa_outbox.contacts (
    phone_number_id    text NOT NULL,
    wa_id              text NOT NULL,
    profile_name       text,
    last_inbound_at    timestamptz,          -- opens the 24-hour window
    next_send_at       timestamptz,          -- pacing: no send to this recipient before this
    pair_paused_until  timestamptz,          -- 131056 back-off: 4^n seconds
    pair_strikes       integer NOT NULL DEFAULT 0,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (phone_number_id, wa_id)
);

-- One token bucket per sender, shared by every worker; paused_until for throttling answers (130429, 80007, 4) and
-- for senders that cannot work until a human acts (auth, blocked).
CREATE TABLE wa_outbox.rate_limits (
    phone_number_id  text PRIMARY KEY,
    mps              double precision NOT NULL CHECK (mps > 0),
    burst            double precision NOT NULL CHECK (burst >= 1),
    tokens           double precision NOT NULL,
    refilled_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    paused_until     timestamptz,
    pause_reason     text,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- How far along a message is, by the status words of Meta's status webhooks: a later webhook for an earlier step
-- (a `delivered` arriving after `read`) never moves a message back.
CREATE FUNCTION wa_outbox.status_rank(status text) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE status WHEN 'sent' THEN 10 WHEN 'delivered' THEN 20 WHEN 'failed' THEN 25
                       WHEN 'read' THEN 30 WHEN 'played' THEN 30 ELSE 0 END
$$;

-- take_tokens(): the shared token bucket. Grants up to `wanted` sends for a sender now (0 while it is paused) and
-- says when the next token will be there; creates the bucket at the default rate on first use. The row lock makes
-- concurrent workers on any number of machines share one rate.
CREATE FUNCTION wa_outbox.take_tokens(sender text, wanted integer, default_mps double precision,
                                      OUT granted integer, OUT next_token_at timestamptz, OUT mps double precision)
LANGUAGE plpgsql AS $$
DECLARE
    b wa_outbox.rate_limits;
    available double precision;
    t timestamptz := clock_timestamp();
BEGIN
    INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
    VALUES (sender, default_mps, greatest(1, default_mps), greatest(1, default_mps), t)
    ON CONFLICT (phone_number_id) DO NOTHING;
    SELECT * INTO b FROM wa_outbox.rate_limits r WHERE r.phone_number_id = sender FOR UPDATE;
    mps := b.mps;
    IF b.paused_until > t THEN
        granted := 0;
        next_token_at := b.paused_until;
        RETURN;
    END IF;
    available := least(b.burst, b.tokens + extract(epoch FROM t - b.refilled_at) * b.mps);
    granted := greatest(0, least(wanted, floor(available)::integer));
    UPDATE wa_outbox.rate_limits r SET tokens = available - granted, refilled_at = t
    WHERE r.phone_number_id = sender;
    next_token_at := t + make_interval(secs => greatest(0, 1 - (available - granted)) / b.mps);
END $$;

-- Heartbeats of running workers, for stuck-worker alerts.
CREATE TABLE wa_outbox.workers (
    id            text PRIMARY KEY,       -- <hostname>:<pid>:<random>
    hostname      text NOT NULL,
    pid           integer NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    state         text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'stopping')),
    info          jsonb NOT NULL DEFAULT '{}'
);

-- enqueue(): the outbox insert for apps in any language, inside the caller's transaction. Returns the id; for a
-- known idempotency key, the existing id (and an error if the key was used for a different message).
CREATE FUNCTION wa_outbox.enqueue(
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

-- enqueue_many(): many messages in one call, set-based (campaigns, imports). `items` is a JSON array of
-- {"to", "message", "idempotency_key"?, "correlation_id"?, "phone_number_id"?}; returns the ids in input order
-- (the existing id for a known idempotency key). All or nothing: one invalid item refuses the whole call.
CREATE FUNCTION wa_outbox.refuse_item(ord bigint, problem text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'item % : %', ord, problem USING ERRCODE = 'invalid_parameter_value';
END $$;

CREATE FUNCTION wa_outbox.enqueue_many(items jsonb) RETURNS bigint[] LANGUAGE plpgsql AS $$
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

-- Support: a message's whole story in one query.
CREATE VIEW wa_outbox.notification_timeline AS
SELECT n.id AS notification_id, n.recipient, n.phone_number_id, n.status AS current_status, n.correlation_id,
       n.wamid, e.id AS event_id, e.event, e.attempt, e.detail, e.created_at
FROM wa_outbox.notifications n
JOIN wa_outbox.notification_events e ON e.notification_id = n.id;

-- Operations: the queue at a glance.
CREATE VIEW wa_outbox.queue_health AS
SELECT 'notifications'::text AS queue, status, count(*) AS rows,
       min(next_attempt_at) FILTER (WHERE status = 'queued') AS oldest_due,
       extract(epoch FROM now() - min(created_at)) AS oldest_age_seconds
FROM wa_outbox.notifications
WHERE status IN ('queued', 'sending', 'unknown', 'dead')
GROUP BY status
UNION ALL
SELECT 'webhook_events', status, count(*),
       min(next_attempt_at) FILTER (WHERE status = 'queued'),
       extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events
WHERE status IN ('queued', 'processing', 'dead')
GROUP BY status;
