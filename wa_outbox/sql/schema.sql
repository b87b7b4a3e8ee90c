-- wa-outbox: the current schema, whole. Read this file to know what the database holds and what its rules are.
-- Revision: 0019_claim_held_locks
--
-- A database gets here through the migrations (migrations/sql/, `wa-outbox db upgrade`); this file is not run by
-- the service. tests/db/test_schema_file.py builds one database from this file alone and one from the migrations and
-- compares their catalogs (tables, columns, constraints, indexes, functions, triggers, views, comments, grants): a
-- migration that changes the schema updates this file, and the `Revision:` line above, in the same commit.
--
-- One section per concern, each table followed by its indexes, its functions and its triggers:
--   Settings                       settings
--   Messages: the outbox           notifications, notification_events (the timeline), notification_timeline,
--                                  status_rank(), next_in_line() (per-recipient order)
--   Message validation             recipient_problem(), message_problem(), key_problem() and their parts
--   Enqueue                        enqueue(), enqueue_many(), enqueue_checked()
--   Webhooks: inbound events       webhook_events, webhook_bodies, callback_outbox_id()
--   Contacts                       contacts (pair pacing), return_pair_reservations()
--   Rate limits                    rate_limits, bucket_shape() (bucket_refill(), bucket_capacity()),
--                                  reserve_slots(), reserve_slots_ahead(), reserve_slots_set()
--   Campaigns                      campaigns, enqueue_campaign(), steer_campaign(), the parking trigger
--   Workers and their metrics      workers, worker_metrics
--   /ops sessions                  ops_sessions
--   Events                         events (the feed), event_type_of(), the emission triggers, events_after()
--   Endpoints                      endpoints, deliveries, delivery_attempts
--   Accounts                       meta_apps, app_secrets, business_accounts, senders
--   Portfolio limits               (issue 20: Meta's messaging limit per business portfolio)
--   Templates                      templates (issue 20: the template lifecycle)
--   Number health                  (issue 20: phone number quality and throughput)
--   Media                          media, media_chunks, media_uploads
--   Views for operations           queue_health
--   Grants
-- A new concern gets a section of its own before "Views for operations". Columns are in the tables' physical order
-- (columns added by later migrations come last: `SELECT *` sees them so). Nothing is granted: the role that runs
-- `db upgrade` owns every object, and the app's own role gets what its DBA grants.
-- Everything lives in schema wa_outbox, so it can sit beside the app's own tables in the app's database.

CREATE SCHEMA IF NOT EXISTS wa_outbox;


-- == Settings =======================================================================================================

-- Service-wide settings written by wa-outbox processes at start-up (the default sender), read by SQL functions such
-- as enqueue() that cannot see the environment.
CREATE TABLE wa_outbox.settings (
    key         text PRIMARY KEY,
    value       text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);


-- == Messages: the outbox ===========================================================================================

-- One row per outbound message.
CREATE TABLE wa_outbox.notifications (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    phone_number_id  text NOT NULL,                       -- the sender (business phone number id)
    recipient        text NOT NULL,                       -- E.164 digits without '+', as Meta's wa_id (check below)
    message          jsonb NOT NULL CHECK (jsonb_typeof(message) = 'object'),  -- Cloud API body, minus `to`
    idempotency_key  text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_hash     text NOT NULL,                       -- with a key: digest of (sender, recipient, message)
    status           text NOT NULL DEFAULT 'queued' CHECK (status IN
                     ('queued', 'sending', 'unknown', 'sent', 'delivered', 'read', 'failed', 'dead', 'cancelled')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- An override of the retry policy; NULL (the default) means the workers' WA_OUTBOX_MAX_ATTEMPTS.
    max_attempts     integer CHECK (max_attempts > 0),
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
    -- A message's campaign (NULL: a transactional message). No foreign key: the check would cost a look-up per row
    -- of a bulk import; campaigns are never deleted while they have messages.
    campaign_id      bigint,
    -- Claim order: lower first. Transactional messages (0) go before campaign messages (1) when both wait, so a
    -- 50,000-row campaign never delays an order confirmation.
    priority         smallint NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 9),
    -- Order: messages to one recipient from one sender go out in the order they were enqueued (by id), one at a
    -- time. Only the head of each (sender, recipient) line is claimable; a follower the claim finds is parked
    -- (`blocked`) out of the due index, and the statement that finishes the head releases the next one
    -- (next_in_line()). ordered = false opts a message out: it neither waits nor makes others wait.
    ordered          boolean NOT NULL DEFAULT true,
    blocked          boolean NOT NULL DEFAULT false,
    CHECK ((status = 'sending') = (locked_until IS NOT NULL)),
    -- Why a queued message waits without spending an attempt, when something other than its schedule holds it: the
    -- portfolio's messaging limit is used up (it goes when a unit frees), or its template is paused or not approved
    -- (it goes when the template is approved again). NULL: nothing holds it. wa_outbox/states.py's HoldReason.
    hold_reason      text CONSTRAINT notifications_hold_reason_check CHECK (hold_reason IN
                     ('messaging_limit', 'template_paused', 'template_not_approved'))
)
-- Queue tables churn: vacuum and analyze after a few percent of changes, not the default 20 % / 10 %, so the
-- claim's index stays small and its plans stay right. fillfactor 90: a new message never lands in the few bytes
-- left on an old history page (with 10 M messages of history, a claim read and dirtied one cold page per such
-- message), and the versions its claim, record and status updates write stay on its own page (bench/history.py).
WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02, fillfactor = 90);
-- The recipient rule without a regular expression: it is checked for every row written, inserts and updates alike
-- (a regular expression per row was 4 % of a bulk enqueue). NOT VALID: the rows written before it were checked by
-- an identical rule (a regular expression), and validating would hold the table's lock for a scan.
ALTER TABLE wa_outbox.notifications ADD CONSTRAINT notifications_recipient_check
    CHECK (length(recipient) BETWEEN 7 AND 15 AND ltrim(recipient, '0123456789') = '' AND left(recipient, 1) <> '0')
    NOT VALID;

CREATE UNIQUE INDEX notifications_idempotency_key ON wa_outbox.notifications (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX notifications_wamid ON wa_outbox.notifications (wamid) WHERE wamid IS NOT NULL;
-- The claim takes due rows by (priority, next_attempt_at). Partial, so its size is the queue's, not the table's
-- (claiming is O(batch)); parked followers are not in it.
CREATE INDEX notifications_due ON wa_outbox.notifications (priority, next_attempt_at)
    WHERE status = 'queued' AND NOT blocked;
-- The claim walks the senders with queued rows in key order and takes each one's due rows, as many as it has send
-- slots for: a sender with a long backlog and no free slot does not hold the others back (many senders).
CREATE INDEX notifications_sender_due ON wa_outbox.notifications (phone_number_id, priority, next_attempt_at)
    WHERE status = 'queued' AND NOT blocked;
-- The rescuer: expired leases.
CREATE INDEX notifications_leased ON wa_outbox.notifications (locked_until) WHERE status = 'sending';
-- Ambiguous sends waiting for a status webhook.
CREATE INDEX notifications_unknown ON wa_outbox.notifications (unknown_since) WHERE status = 'unknown';
-- Support look-ups: by phone, by correlation id.
CREATE INDEX notifications_recipient ON wa_outbox.notifications (recipient, created_at DESC);
CREATE INDEX notifications_correlation_id ON wa_outbox.notifications (correlation_id)
    WHERE correlation_id IS NOT NULL;
-- A campaign's messages, for steering it (pause, resume, cancel) and its summary.
CREATE INDEX notifications_campaign ON wa_outbox.notifications (campaign_id, status) WHERE campaign_id IS NOT NULL;
-- The unfinished ordered messages of each line, by id: "is anything earlier still to go?" and "who is next?" are one
-- index probe each.
CREATE INDEX notifications_line ON wa_outbox.notifications (phone_number_id, recipient, id)
    WHERE ordered AND status IN ('queued', 'sending', 'unknown');
-- Parked followers (a handful of lines at any time), for the sweep that releases a line whose release was missed
-- (release_stalled_lines.sql).
CREATE INDEX notifications_blocked ON wa_outbox.notifications (phone_number_id, recipient, id)
    WHERE blocked AND status = 'queued';
-- The dead-letter queue (dead, and Meta-failed: dlq list, /v1/dead), read newest first by id (list_dead.sql,
-- keyset pagination).
CREATE INDEX notifications_dead_or_failed ON wa_outbox.notifications (id) WHERE status IN ('dead', 'failed');
-- Dead letters counted and aged from an index alone: the /metrics scrape, queue_health and the ops page read no
-- heap row per dead letter (they grow with history: one in a hundred messages).
CREATE INDEX notifications_dead_or_failed_age ON wa_outbox.notifications (status, created_at)
    WHERE status IN ('dead', 'failed');
-- The ops page's dead-letter groups by error code (ops_dead_groups.sql) and each group's newest samples, from the
-- index alone: the planner takes an index-only scan of an expression index only when the expression's column is in
-- the index too (INCLUDE). ('' is "no code", so one equality serves every group.)
CREATE INDEX notifications_dead_code ON wa_outbox.notifications ((coalesce(last_error ->> 'code', '')), id)
    INCLUDE (last_error) WHERE status = 'dead';
-- The /metrics scrape (queue_metrics.sql) and queue_health count and age the waiting queue from an index alone.
-- One entry per queued row (blocked or not); a row gets one when it is enqueued or put back in the queue.
CREATE INDEX notifications_queued_age ON wa_outbox.notifications (created_at) INCLUDE (next_attempt_at)
    WHERE status = 'queued';
-- Retention (`wa-outbox prune`) has no index of its own: it walks the primary key over the ids created before its
-- cutoff (ids grow with time) and filters status and age on the rows it reads. An index of old finished rows would
-- cover nearly all of history and cost an entry on every status change, on the send path, for a daily job.

-- The timeline: one row per transition, append-only.
CREATE TABLE wa_outbox.notification_events (
    id               bigint GENERATED ALWAYS AS IDENTITY,
    -- No foreign key: every event is written by the same statement that changes its message, and the check would
    -- cost a look-up per event on the hottest paths. Purge and prune delete a message's events with it.
    notification_id  bigint NOT NULL,
    event            text NOT NULL,   -- the words of wa_outbox/states.py's TimelineEvent (check below)
    attempt          integer,
    detail           jsonb,           -- error detail, wamid, worker, policy applied ...
    correlation_id   text,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- One index serves every read (a message's timeline, in order) and costs one entry per event written.
    PRIMARY KEY (notification_id, id)
);
-- NOT VALID: early versions could write a status word Meta invented as an event; those rows stay as history (the
-- timeline is append-only), every new row is checked.
ALTER TABLE wa_outbox.notification_events ADD CONSTRAINT notification_events_event_check CHECK (event IN
    ('queued', 'sending', 'sent', 'retry_scheduled', 'throttled', 'sender_paused', 'pair_limited', 'unknown',
     'reconciled', 'released', 'delivered', 'read', 'played', 'failed', 'unrecognized_status', 'dead', 'requeued',
     'cancelled', 'limit_held', 'template_held', 'template_released')) NOT VALID;
-- The ops page's throughput per minute over the last hour (ops_throughput.sql). The timeline is append-only, so
-- created_at follows the rows' physical order: a BRIN index finds the last hour's pages with no B-tree entry per
-- event on the send path. 16 pages per range, not 128: a small event that lands in an old page's free space makes
-- its whole range reach now, and smaller ranges read fewer rows thrown away (72,000 instead of 524,000 on 10 M).
CREATE INDEX notification_events_created_at ON wa_outbox.notification_events USING brin (created_at)
    WITH (pages_per_range = 16, autosummarize = on);

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

-- Support: a message's whole story in one query.
CREATE VIEW wa_outbox.notification_timeline AS
SELECT n.id AS notification_id, n.recipient, n.phone_number_id, n.status AS current_status, n.correlation_id,
       n.wamid, e.id AS event_id, e.event, e.attempt, e.detail, e.created_at
FROM wa_outbox.notifications n
JOIN wa_outbox.notification_events e ON e.notification_id = n.id;

-- How far along a message is, by the status words of Meta's status webhooks: a later webhook for an earlier step
-- (a `delivered` arriving after `read`) never moves a message back.
CREATE FUNCTION wa_outbox.status_rank(status text) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE status WHEN 'sent' THEN 10 WHEN 'delivered' THEN 20 WHEN 'failed' THEN 25
                       WHEN 'read' THEN 30 WHEN 'played' THEN 30 ELSE 0 END
$$;

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


-- == Message validation =============================================================================================
-- One owner of the rules for what may be queued: recipient_problem(), message_problem() and key_problem() (NULL
-- when fine, else the reason), called by enqueue(), enqueue_many() and enqueue_campaign(). wa_outbox/messages.py
-- mirrors them word for word, so Python callers get the same verdict before anything reaches their transaction;
-- tests/db/test_validation.py runs one table of cases through every entry point.
-- Every rule is a LANGUAGE sql expression without sub-queries, so Postgres inlines it into the statement that calls
-- it (no function call per item of a bulk enqueue). The two rules that walk the whole message are their own
-- function, message_json_problem(), which a batch asks only when batch_json_suspect() says some item could break
-- them: they are the last in order, so skipping them then changes no verdict.

-- The recipient's digits (Meta's wa_id) without the separators people type, or NULL when that is not E.164. Digits
-- already (as every Python caller sends it) need no regular expression: they were a tenth of a bulk enqueue's time.
CREATE FUNCTION wa_outbox.recipient_digits(to_ text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN length(to_) BETWEEN 7 AND 15 AND ltrim(to_, '0123456789') = '' AND left(to_, 1) <> '0' THEN to_
                ELSE substring(ltrim(translate(to_, E' \t\n\r\f\x0B().-', ''), '+') FROM '^[1-9][0-9]{6,14}$') END
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

-- Every rule but the two that walk the message, checked in order (each rule a WHEN). `biz_opaque_callback_data` is
-- the caller's own tracker: it is sent as "<outbox id>:<tracker>", and Meta allows 512 characters (an id of up to
-- 19 digits and ':' go first).
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
        -- A media message may name a file handed over to wa-outbox (POST /v1/media, upload_media()) instead of
        -- Meta's media id or a public link: {"document": {"upload": 12, "filename": "invoice.pdf"}} (0012_media).
        WHEN wa_outbox.message_type(message) IN ('image', 'audio', 'video', 'document', 'sticker')
                AND message->wa_outbox.message_type(message) ? 'upload'
                AND (jsonb_typeof(message->wa_outbox.message_type(message)->'upload') IS DISTINCT FROM 'number'
                     OR (message->wa_outbox.message_type(message)->>'upload') !~ '^[1-9][0-9]{0,17}$')
            THEN wa_outbox.message_type(message) || '.upload must be the id POST /v1/media or upload_media() '
                 'returned (a positive integer)'
        WHEN wa_outbox.message_type(message) IN ('image', 'audio', 'video', 'document', 'sticker')
                AND message->wa_outbox.message_type(message) ? 'upload'
                AND message->wa_outbox.message_type(message) ?| '{id,link}'
            THEN wa_outbox.message_type(message) || '.upload stands for ' || wa_outbox.message_type(message)
                 || '.id and ' || wa_outbox.message_type(message) || '.link: give only one of the three'
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

-- Why `message` cannot be queued, or NULL.
CREATE FUNCTION wa_outbox.message_problem(message jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(wa_outbox.message_form_problem(message), wa_outbox.message_json_problem(message))
$$;


-- == Enqueue ========================================================================================================

-- enqueue(): the outbox insert for apps in any language, inside the caller's transaction. Returns the id; for a
-- known idempotency key, the existing id (and an error if the key was used for a different message). `ordered`
-- (default true): wait for earlier messages to the same recipient. Every parameter after `message` has a default,
-- so every call (positional or named) keeps working as parameters are added.
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
    v_sender text;  -- the phone number id `phone_number_id` (a number or an alias; NULL: the default) stands for
    v_body jsonb;  -- the message minus the fields wa-outbox sets itself
    v_hash text;
    v_id bigint;
    v_existing_hash text;
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_sender := wa_outbox.resolve_sender(enqueue.phone_number_id);
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

-- An invalid item of a bulk enqueue refuses the whole call, naming the item (1-based) and the reason.
CREATE FUNCTION wa_outbox.refuse_item(ord bigint, problem text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'item % : %', ord, problem USING ERRCODE = 'invalid_parameter_value';
END $$;

-- enqueue_many(): many messages in one call, set-based (campaigns, imports). `items` is a JSON array of
-- {"to", "message", "idempotency_key"?, "correlation_id"?, "phone_number_id"?}; returns the ids in input order
-- (the existing id for a known idempotency key). All or nothing: the first invalid item (in input order) aborts the
-- statement before either insert writes a row. Items with an idempotency key go in through INSERT ... ON CONFLICT,
-- the others through a plain INSERT: ON CONFLICT inserts every row speculatively (a lock taken and released, one
-- more WAL record, per row). work_mem: a chunk of 5,000 template messages outgrows the default 4 MB, and its sort
-- went to disk.
CREATE FUNCTION wa_outbox.enqueue_many(items jsonb) RETURNS bigint[] LANGUAGE plpgsql
    SET work_mem = '64MB' AS $$
DECLARE
    -- The default sender and its verdict, once per batch (sender_choice(NULL)), not once per item.
    v_default_choice text[] := wa_outbox.sender_choice(NULL);
    v_default text := v_default_choice[1];
    -- Looked up once, not per item (a catalog look-up per row was a fifth of the statement's time).
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
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
               i.item->'phone_number_id' AS sender_json,
               CASE WHEN jsonb_typeof(i.item->'phone_number_id') = 'string' THEN i.item->>'phone_number_id' END
                   AS sender_text
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
                                THEN '`phone_number_id` must be the numeric id of a business phone number'
                            -- None given: the default's verdict, known already.
                            WHEN sender_text IS NULL THEN v_default_choice[2]
                            ELSE named[2]
                       END)
               END AS problem
        FROM (SELECT *, CASE WHEN jsonb_typeof(to_) = 'string' THEN wa_outbox.recipient_digits(to_ #>> '{}') END
                            AS recipient,
                     CASE WHEN sender_text IS NULL THEN v_default ELSE named[1] END AS sender
              FROM (SELECT *,
                           -- A phone number id is sender_choice()'s own answer, without a call per item; an alias
                           -- (or anything else) asks it.
                           CASE WHEN sender_text IS NULL THEN NULL
                                WHEN sender_text ~ '^[0-9]{1,32}$' THEN ARRAY[sender_text, NULL]
                                ELSE wa_outbox.sender_choice(sender_text) END AS named
                    FROM input) named) input
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
-- case: tests/db/test_validation.py). Checking them again in SQL was a third of Postgres's CPU per message (each rule
-- per item, the walks over the batch, taking each field out of its item); here jsonb_to_recordset() reads every
-- item's fields in one step. Each item: {"to": <digits>, "message": <object>, "idempotency_key"?, "correlation_id"?,
-- "phone_number_id"?}. The one rule Python cannot know, the default sender (from settings), is checked here; the
-- table's own checks still hold. SQL callers use enqueue_many(), which checks everything.
CREATE FUNCTION wa_outbox.enqueue_checked(items jsonb) RETURNS bigint[] LANGUAGE plpgsql
    SET work_mem = '64MB' AS $$
DECLARE
    v_default_choice text[] := wa_outbox.sender_choice(NULL);  -- the default sender, once per batch
    v_default text := v_default_choice[1];
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
    v_missing bigint;
    v_new bigint[];
    v_keys text[];
    v_hashes text[];
    v_keyed boolean;
    v_ids bigint[];
    v_conflict boolean;
BEGIN
    IF v_default IS NULL THEN
        -- No default: the first item without its own sender refuses the batch (enqueue_many()'s last rule).
        SELECT i.ord INTO v_missing FROM jsonb_array_elements(items) WITH ORDINALITY AS i(item, ord)
        WHERE i.item->>'phone_number_id' IS NULL ORDER BY i.ord LIMIT 1;
        IF v_missing IS NOT NULL THEN
            PERFORM wa_outbox.refuse_item(v_missing, v_default_choice[2]);
        END IF;
    END IF;
    WITH input AS (
        -- Python checked each sender's form (digits, or an alias, which starts with a letter): the first character
        -- tells a phone number id (taken as given, as sender_choice() does) from an alias (resolve_sender()) without
        -- a regular expression per item.
        SELECT i.ord, i."to" AS recipient,
               CASE WHEN i.phone_number_id IS NULL THEN v_default
                    WHEN ascii(i.phone_number_id) BETWEEN 48 AND 57 THEN i.phone_number_id
                    ELSE wa_outbox.resolve_sender(i.phone_number_id) END AS sender,
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


-- == Enqueue (issue 23: the first hour) ==
-- check_message(): what enqueue() would refuse, asked without raising, for SQL callers in any language with plain text
-- arguments (the message as JSON text): NULL when enqueue() would queue it, else the reason it would raise with.
-- enqueue() raising aborts the caller's transaction (that is SQL; docs/enqueue.md shows a SAVEPOINT); asking first
-- keeps it. The same rules in the same order as enqueue(): recipient_problem(), message_problem(), key_problem(),
-- sender_choice(). STABLE: the sender rule reads the registered senders and the default.
CREATE FUNCTION wa_outbox.check_message(
    to_ text,
    message text,
    idempotency_key text DEFAULT NULL,
    correlation_id text DEFAULT NULL,
    phone_number_id text DEFAULT NULL
) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_message jsonb;
BEGIN
    BEGIN
        v_message := message::jsonb;
    EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN  -- not JSON, or a \u0000
        RETURN '`message` is not JSON Postgres can store: ' || SQLERRM;
    END;
    RETURN coalesce(wa_outbox.recipient_problem(to_jsonb(to_)), wa_outbox.message_problem(v_message),
                    wa_outbox.key_problem('idempotency_key', to_jsonb(check_message.idempotency_key)),
                    wa_outbox.key_problem('correlation_id', to_jsonb(check_message.correlation_id)),
                    (wa_outbox.sender_choice(check_message.phone_number_id))[2]);
END $$;

-- == Webhooks: inbound events =======================================================================================

-- Inbound webhook changes: deduplicated by a stable key, and a queue the workers drain.
CREATE TABLE wa_outbox.webhook_events (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- m:<wamid> | s:<wamid>:<status>[:<participant>] | d:<sha256 of the change>. Compared byte by byte (COLLATE
    -- "C"): every stored update probes and enters the unique index on it, and under the database's collation each
    -- comparison was a strcoll() (slow under the usual en_US.UTF-8). A key is only matched for equality (and sorted
    -- for lock order), and equality is the same under every deterministic collation.
    dedup_key        text COLLATE "C" NOT NULL,
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
    max_attempts     integer CHECK (max_attempts > 0),  -- NULL: the workers' WA_OUTBOX_MAX_ATTEMPTS
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    locked_by        text,
    locked_until     timestamptz,
    last_error       text,
    received_at      timestamptz NOT NULL DEFAULT now(),
    processed_at     timestamptz,
    raw_body_sha256  bytea,           -- webhook_bodies: the exact bytes, when they had to be sanitized; else NULL
    app_id           text,            -- the app whose secret verified the POST (NULL: WHATSAPP_APP_SECRET)
    -- a change for a number (or, without one, a business account) the registry does not hold: stored, attributed to
    -- no sender, counted and shown on /ops (webhook_routing.py); always false without registered senders
    unregistered     boolean NOT NULL DEFAULT false,
    CONSTRAINT webhook_events_dedup_key UNIQUE (dedup_key)
)
WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);  -- a queue: see notifications
CREATE INDEX webhook_events_due ON wa_outbox.webhook_events (next_attempt_at) WHERE status = 'queued';
CREATE INDEX webhook_events_leased ON wa_outbox.webhook_events (locked_until) WHERE status = 'processing';
CREATE INDEX webhook_events_dead ON wa_outbox.webhook_events (received_at) WHERE status = 'dead';
CREATE INDEX webhook_events_received_at ON wa_outbox.webhook_events (received_at);
CREATE INDEX webhook_events_raw_body ON wa_outbox.webhook_events (raw_body_sha256) WHERE raw_body_sha256 IS NOT NULL;
-- Status events not yet done, by wamid: what settle_unknown.sql looks up. An inbound message never enters it, nor
-- does a processed status's new row version, so the hot INSERT writes one index entry fewer per message.
CREATE INDEX webhook_events_wamid ON wa_outbox.webhook_events (wamid) WHERE kind = 'status' AND status <> 'done';
-- /ops's unregistered numbers (ops_unregistered.sql): partial, so the hot INSERT of registered changes skips it.
CREATE INDEX webhook_events_unregistered ON wa_outbox.webhook_events (received_at) WHERE unregistered;

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

-- The exact bytes of webhook POSTs whose JSON had to be sanitized to fit jsonb (NUL, lone surrogates, numbers beyond
-- range) or could not be split into events at all: once per body, however many of its events refer to it. Clean
-- POSTs store none. Written in the same statement as the events that refer to them (no foreign key: its check would
-- run for every row of the hot INSERT).
CREATE TABLE wa_outbox.webhook_bodies (
    sha256       bytea PRIMARY KEY,
    body         bytea NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);
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


-- == Contacts: per (sender, customer) ===============================================================================

-- The 24-hour customer-service window and per-recipient pacing (the pair rate limit).
CREATE TABLE wa_outbox.contacts (
    phone_number_id    text NOT NULL,
    wa_id              text NOT NULL,
    profile_name       text,
    last_inbound_at    timestamptz,          -- opens the 24-hour window
    pair_paused_until  timestamptz,          -- 131056 back-off: 4^n seconds
    pair_strikes       integer NOT NULL DEFAULT 0,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    -- Pair pacing: a generic cell rate algorithm per (sender, recipient). The time the pair's budget is spent up
    -- to; a send is allowed while it is at most (burst - 1) intervals ahead of now, and pushes it one interval
    -- further (WA_OUTBOX_PAIR_RATE_SECONDS, WA_OUTBOX_PAIR_BURST).
    pair_paced_until   timestamptz,
    PRIMARY KEY (phone_number_id, wa_id)
)
-- Each claim moves its recipients' pair_paced_until. With room on the row's page that update is HOT: no new
-- contacts_pkey entry (a cold index leaf dirtied, and split, per message) and no second heap page.
WITH (fillfactor = 80);

-- Give back the pair-pacing reservations (contacts.pair_paced_until: each claim moves it one interval per message)
-- of claimed rows that go back unsent (given back before their send slot): the recipient is then not held back by a
-- send that never happened. Called by the worker before it records the rows as released, while they are still
-- `sending` under its lease (so none can be claimed again meanwhile); rows that are not are skipped. Returns how
-- many reservations were given back.
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


-- == Rate limits: send slots per sender =============================================================================

-- One schedule per sender, shared by every worker; paused_until for throttling answers (130429, 80007, 4) and for
-- senders that cannot work until a human acts (auth, blocked).
CREATE TABLE wa_outbox.rate_limits (
    phone_number_id  text PRIMARY KEY,
    mps              double precision NOT NULL CHECK (mps > 0),  -- the most sends in any one-second window
    burst            double precision CHECK (burst >= 1),
    tokens           double precision NOT NULL,    -- the bucket's level at refilled_at (negative: slots reserved)
    refilled_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    paused_until     timestamptz,
    pause_reason     text,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
COMMENT ON COLUMN wa_outbox.rate_limits.burst IS
    'NULL: the default pacing (never more than mps in any one-second window); a number: a classic bucket of that size';

-- Reserved send slots: a generic cell rate algorithm per sender. A claim reserves each row's send time (its slot)
-- up to a short horizon ahead, slots spaced 1/R, and the worker sends each row at its slot: the spacing at Meta's
-- end is the slot spacing plus a small, nearly constant delay, and the rate does not depend on how fast workers come
-- back to claim (a bucket granting tokens "now" let sends granted 1/R apart arrive closer, as the delay from grant
-- to send varied by tens of ms).
-- The state is in rate_limits (tokens, refilled_at): the bucket level at time t is
--     tokens + (t - refilled_at) * refill, at most the capacity,
-- and the k-th slot a claim takes is when that level reaches k: t + greatest(0, k - level) / refill. Reserving k
-- slots takes k tokens at once, so `tokens` goes negative while slots are reserved ahead (at most horizon * refill).
-- That is exactly a GCRA with tolerance (capacity - 1) / refill; the theoretical time of the next slot is
-- refilled_at + (capacity - tokens) / refill.
-- The shape: by default (burst NULL) the capacity is exactly one slot and the refill mps / (1 + slot_margin), so any
-- mps + 1 consecutive slots span 1 + slot_margin seconds: a send may go up to slot_margin seconds later than its slot
-- relative to the others (grant-to-arrival jitter, a stalled thread; bench/pacing.py measures it) and still no
-- one-second window at Meta's end holds more than mps. An explicit burst (`ratelimit set --burst B`) is the classic
-- bucket: refill at mps, capacity B, so a one-second window may hold up to B + mps sends.
-- slot_margin(): up to Meta's highest throughput (1,000 mps, https://developers.facebook.com/docs/whatsapp/throughput)
-- the refill is 98.5 % of mps (a margin of 15.2 ms: slots 1/(0.985 mps) apart, any mps + 1 of them span 1.015 s),
-- so a paced number reaches 98.5 % of its rate. A rate above it is none Meta sets (a "no limit" such as the
-- benchmarks' 10^6): there the margin grows with the rate (15.2 ms per 1,000 mps), which costs a rate no machine
-- reaches nothing and lets a send go as late as a busy machine makes it (at 10^6 mps: 15 s) without a re-slot; at
-- 2,000 mps the schedule is 97 % of the rate with 30 ms of margin. The worker reads each claimed row's margin and
-- re-slots a send only past it (worker/_sender.py, late_send_limit).
CREATE FUNCTION wa_outbox.slot_margin(mps double precision, burst double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NOT NULL THEN 0
                WHEN mps <= 1000 THEN 1 / (1 - 0.015) - 1
                ELSE (1 / (1 - 0.015) - 1) * mps / 1000 END
$$;

-- bucket_refill() and bucket_capacity() are the shape; bucket_shape() returns both. The two are single expressions,
-- which the planner inlines where they are called: the claim calls them for every sender it walks, where a call of
-- bucket_shape() (a record: never inlined) ran its own little query each time (claim_notifications.sql).
CREATE FUNCTION wa_outbox.bucket_refill(mps double precision, burst double precision) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NOT NULL THEN mps
                WHEN mps <= 1000 THEN mps * (1 - 0.015)
                ELSE mps / (1 + wa_outbox.slot_margin(mps, NULL)) END
$$;

CREATE FUNCTION wa_outbox.bucket_capacity(mps double precision, burst double precision) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN burst IS NULL THEN 1 ELSE burst END
$$;

CREATE FUNCTION wa_outbox.bucket_shape(mps double precision, burst double precision,
                                       OUT refill double precision, OUT capacity double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT wa_outbox.bucket_refill(mps, burst), wa_outbox.bucket_capacity(mps, burst)
$$;

-- reserve_slots_set(): reserve_slots() for several senders at once, in one statement (the claim serves many senders
-- per batch: one function call, one UPDATE, instead of one of each per sender). The same rule, for each sender of
-- `senders` (distinct) wanting the matching count of `wants`: creates missing buckets at the default rate, locks the
-- senders' rows in key order (two claims lock the same rows in the same order: no deadlocks), reads the time after
-- the locks are taken, and writes only the schedules that granted something. One row per sender, in key order.
-- `capped` (a claim reserving for itself): the lead is at most one slot interval (reserve_slots). Not capped (slots
-- reserved ahead of a claim, reserve_slots_ahead): the lead is the caller's, the time its rows need to reach their
-- send threads (the whole claim): capped there, the rows of every claim at a rate above 1 / claim time reached their
-- threads after their slots and were re-slotted one by one.
-- `held`: the caller already holds the lock of every sender's row (the claim's walk took them, FOR UPDATE in this
-- transaction): the rows exist and no one else can change them, so none is created or locked again here (a claim
-- serving 64 senders, one row each, spent ~1.5 ms of its ~10 on these and the walk's bucket_shape() calls).
CREATE FUNCTION wa_outbox.reserve_slots_set(senders text[], wants integer[], default_mps double precision,
                                            lead double precision, horizon double precision,
                                            capped boolean DEFAULT true, held boolean DEFAULT false)
    RETURNS TABLE (phone_number_id text, granted integer, slots_from timestamptz, level double precision,
                   refill double precision, paused boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    IF NOT held THEN
        INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
        SELECT u.s, default_mps, NULL, wa_outbox.bucket_capacity(default_mps, NULL), clock_timestamp()
        FROM unnest(senders) AS u(s)
        WHERE NOT EXISTS (SELECT 1 FROM wa_outbox.rate_limits r WHERE r.phone_number_id = u.s)
        ORDER BY u.s
        ON CONFLICT (phone_number_id) DO NOTHING;
        PERFORM FROM wa_outbox.rate_limits r WHERE r.phone_number_id = ANY (senders)
        ORDER BY r.phone_number_id FOR UPDATE;
    END IF;
    RETURN QUERY
    WITH locked AS MATERIALIZED (  -- locked above, or by the caller (`held`); = ANY: key look-ups, never a scan
        SELECT r.phone_number_id AS sender, r.mps, r.burst, r.tokens, r.refilled_at, r.paused_until, u.n AS wanted
        FROM wa_outbox.rate_limits r JOIN unnest(senders, wants) AS u(s, n) ON u.s = r.phone_number_id
        WHERE r.phone_number_id = ANY (senders)
    ), timed AS MATERIALIZED (  -- the earliest slot, read after the locks
        SELECT l.*, sh.refill AS rate, sh.capacity,
               clock_timestamp()
                   + make_interval(secs => CASE WHEN capped THEN least(lead, 1 / sh.refill) ELSE lead END) AS t
        FROM locked l, LATERAL (SELECT wa_outbox.bucket_refill(l.mps, l.burst) AS refill,
                                       wa_outbox.bucket_capacity(l.mps, l.burst) AS capacity) sh
    ), shaped AS MATERIALIZED (
        SELECT x.sender, x.rate, x.wanted, coalesce(x.paused_until > x.t, false) AS halted,
               CASE WHEN x.paused_until > x.t THEN x.paused_until ELSE x.t END AS slots_at,
               CASE WHEN x.paused_until > x.t THEN x.capacity  -- the bucket refills during the pause
                    ELSE least(x.capacity, x.tokens + extract(epoch FROM x.t - x.refilled_at) * x.rate) END AS lvl
        FROM timed x
    ), decided AS MATERIALIZED (
        -- slot k is within the horizon while (k - level) / refill <= horizon (+ 1e-9: float rounding)
        SELECT s.*, CASE WHEN s.halted THEN 0
                         ELSE greatest(0, least(s.wanted, floor(s.lvl + horizon * s.rate + 1e-9)::integer)) END AS n
        FROM shaped s
    ), moved AS (  -- an empty grant leaves the schedule as it was (see reserve_slots_ahead)
        UPDATE wa_outbox.rate_limits r SET tokens = d.lvl - d.n, refilled_at = d.slots_at
        FROM decided d WHERE r.phone_number_id = d.sender AND d.n > 0
    )
    SELECT d.sender, d.n, d.slots_at, d.lvl, d.rate, d.halted FROM decided d ORDER BY d.sender;
END $$;

-- reserve_slots(): up to `wanted` send slots for a sender, none earlier than `lead` seconds from now (the claim's
-- own latency: its rows reach the worker before their slot, so an idle sender's first send is not late on its slot
-- and squeezed against the next ones; at most one slot interval, so at rates the workers cannot reach, where the
-- schedule never fills, a claim's rows still go at once) and none later than `horizon` seconds after that; none
-- while it is paused.
-- Slot k (1-based) is at slots_from + greatest(0, k - level) / refill; the caller puts a row that got no slot back
-- until its slot would come within the horizon (the same formula). Paused: slots_from is the pause's end and
-- nothing is granted. Creates the bucket at the default rate on first use. The row lock makes concurrent workers on
-- any number of machines share one schedule; the time is read after it is taken, so a claim that waited for the
-- lock still reserves from the schedule as the previous holder left it. A reservation granting nothing writes
-- nothing: refilled_at identifies the last reservation for reserve_slots_ahead's refund, and an empty grant must not
-- spoil the refund of one that got slots. The rule is reserve_slots_set's, for one sender.
CREATE FUNCTION wa_outbox.reserve_slots(sender text, wanted integer, default_mps double precision,
                                        lead double precision, horizon double precision,
                                        OUT granted integer, OUT slots_from timestamptz, OUT level double precision,
                                        OUT refill double precision, OUT paused boolean)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT g.granted, g.slots_from, g.level, g.refill, g.paused INTO granted, slots_from, level, refill, paused
    FROM wa_outbox.reserve_slots_set(ARRAY[sender], ARRAY[wanted], default_mps, lead, horizon) g;
END $$;

-- Slots reserved ahead, in a transaction of their own (reserve_slots_ahead.sql, a short statement committed at once):
-- reserving inside the claim held the sender's rate_limits row lock through the rest of the claim and its commit's
-- WAL flush, so the claims of every worker for one sender ran one at a time (docs/drain-profile.md). A worker
-- reserves the slots of the senders it claimed for last time just before its claim and hands the grant to the claim,
-- which then takes no lock on rate_limits for them. Slots reserved but not used (the claim found fewer rows) are lost
-- capacity, never a rate violation; they come back (`unused`) only while they are still the end of the sender's
-- schedule, i.e. no one reserved a slot since (`reserved_at`, the refilled_at this worker's reservation left): then the
-- schedule is exactly as if they had never been reserved. The lead is not capped at one slot interval (see
-- reserve_slots_set): the caller's lead covers its claim, or, re-slotting a send that slipped, its reply.
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
    FROM wa_outbox.reserve_slots_set(ARRAY[sender], ARRAY[wanted], default_mps, lead, horizon, false) g;
END $$;


-- == Campaigns ======================================================================================================

-- A campaign is a named set of messages an operator imports and steers as one (wa-outbox campaign …). Its messages
-- are notifications rows with its campaign_id.
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

-- Bulk import of one campaign's chunk (wa-outbox campaign import): in one statement, find or create the campaign by
-- name, refuse a cancelled one, and insert the chunk's messages with the campaign's id, priority 1 and the
-- campaign's sender. Each item is {"to", "message", "idempotency_key"} (the key derived from the campaign name and
-- the row), validated by the same functions as enqueue_many; a known key inserts nothing (a re-import). Messages of
-- a paused campaign are parked (next_attempt_at = 'infinity') until `campaign resume`.
-- A new campaign's sender: phone_number_id (a number or an alias), else default_sender (the caller's
-- WHATSAPP_PHONE_NUMBER_ID), else the default (sender_choice()); an existing campaign keeps its own, and naming
-- another is refused.
CREATE FUNCTION wa_outbox.enqueue_campaign(campaign_name text, phone_number_id text, items jsonb,
                                           default_sender text DEFAULT NULL)
    RETURNS TABLE (campaign_id bigint, campaign_status text, inserted integer, present integer)
    LANGUAGE plpgsql SET work_mem = '64MB' AS $$
#variable_conflict use_column
DECLARE
    v_choice text[] := wa_outbox.sender_choice(coalesce(enqueue_campaign.phone_number_id, default_sender));
    v_sender text := v_choice[1];
    v_sequence regclass := pg_get_serial_sequence('wa_outbox.notifications', 'id')::regclass;
    v_campaign wa_outbox.campaigns%ROWTYPE;
    v_json_suspect boolean;
    v_inserted integer;
BEGIN
    IF jsonb_typeof(items) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A sender named must resolve; none named, a campaign that exists already needs no default.
    IF v_sender IS NULL AND (enqueue_campaign.phone_number_id IS NOT NULL
                             OR NOT EXISTS (SELECT FROM wa_outbox.campaigns c WHERE c.name = campaign_name)) THEN
        RAISE EXCEPTION '%', v_choice[2] USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO wa_outbox.campaigns AS c (name, phone_number_id) VALUES (campaign_name, v_sender)
    ON CONFLICT (name) DO NOTHING;
    -- FOR SHARE: a pause, resume or cancel waits for this chunk to commit, so it also moves the rows it adds.
    SELECT * INTO v_campaign FROM wa_outbox.campaigns c WHERE c.name = campaign_name FOR SHARE;
    IF v_campaign.status = 'cancelled' THEN
        RAISE EXCEPTION 'campaign % is cancelled: nothing more can be imported into it', campaign_name
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF enqueue_campaign.phone_number_id IS NOT NULL AND v_campaign.phone_number_id <> v_sender THEN
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


-- == Workers and their metrics ======================================================================================

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


-- == /ops sessions ==================================================================================================

-- One row per logged-in /ops session (wa_outbox/web/ops_sessions.py): login inserts it, logout deletes it, and every
-- /ops request looks it up, so a copied cookie stops working the moment its session is logged out or its token
-- leaves WA_OUTBOX_API_TOKENS. Nothing in a row can be used as a session or a token: the cookie carries a random
-- 256-bit secret and the table only its SHA-256; the token is kept as an HMAC under the app secret (a fingerprint
-- to tell which token opened the session, never the token).
CREATE TABLE wa_outbox.ops_sessions (
    id                 bytea PRIMARY KEY CHECK (length(id) = 32),                 -- sha256 of the cookie's secret
    token_fingerprint  bytea NOT NULL CHECK (length(token_fingerprint) = 32),    -- HMAC-SHA256 of the API token
    created_at         timestamptz NOT NULL DEFAULT now(),
    last_seen_at       timestamptz NOT NULL DEFAULT now(),                        -- moved at most once a minute
    expires_at         timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);
-- Expired sessions are deleted at each login and by `wa-outbox prune`.
CREATE INDEX ops_sessions_expires_at ON wa_outbox.ops_sessions (expires_at);


-- == Events =========================================================================================================
-- One row per event. The feed's order is (txid, seq), not seq: a sequence value is taken at INSERT but becomes
-- visible at COMMIT, so a reader of `seq > cursor` would skip a row whose transaction commits after a later one's.
-- A reader takes only rows whose transaction is older than every transaction still running
-- (txid < pg_snapshot_xmin(pg_current_snapshot())): no row can appear behind such a position later.
CREATE TABLE wa_outbox.events (
    seq              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    txid             xid8 NOT NULL DEFAULT pg_current_xact_id(),  -- the writing transaction
    type             text NOT NULL,           -- the words of wa_outbox/states.py's EventType (check below)
    occurred_at      timestamptz NOT NULL DEFAULT now(),
    -- The conversation the event belongs to (the business number, the customer), for endpoints that deliver each
    -- conversation in order; NULL for account-wide events.
    phone_number_id  text,
    wa_id            text,
    data             jsonb NOT NULL CHECK (jsonb_typeof(data) = 'object')
)
WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE wa_outbox.events ADD CONSTRAINT events_type_check CHECK (type IN
    ('message.received', 'message.status', 'message.echo', 'media.ready',
     'template.status', 'template.quality', 'template.category', 'template.components',
     'account.update', 'account.review', 'account.alert', 'business.capability',
     'phone_number.name', 'phone_number.quality', 'call', 'user.preferences', 'security', 'flows',
     'webhook.other'));
-- The feed: every reader walks this index from its cursor.
CREATE INDEX events_feed ON wa_outbox.events (txid, seq);
-- The feed's horizon: every transaction whose xid is below it has ended, so no event can appear below it later. A
-- reader (the feed, the endpoints' dispatch) takes only events with txid below it: the one owner of that rule.
CREATE FUNCTION wa_outbox.events_horizon() RETURNS xid8 LANGUAGE sql STABLE AS $$
    SELECT pg_snapshot_xmin(pg_current_snapshot())
$$;

-- Meta's webhook field → the event type it becomes (a change of that field). wa_outbox/events.py FIELD_EVENT_TYPES
-- is the same table (tests/db/test_events_emission.py compares them); a field not listed is 'webhook.other'.
CREATE FUNCTION wa_outbox.event_type_of(field text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE field
        WHEN 'message_template_status_update' THEN 'template.status'
        WHEN 'message_template_quality_update' THEN 'template.quality'
        WHEN 'template_category_update' THEN 'template.category'
        WHEN 'message_template_components_update' THEN 'template.components'
        WHEN 'account_update' THEN 'account.update'
        WHEN 'account_review_update' THEN 'account.review'
        WHEN 'account_alerts' THEN 'account.alert'
        WHEN 'business_capability_update' THEN 'business.capability'
        WHEN 'phone_number_name_update' THEN 'phone_number.name'
        WHEN 'phone_number_quality_update' THEN 'phone_number.quality'
        WHEN 'calls' THEN 'call'
        WHEN 'user_preferences' THEN 'user.preferences'
        WHEN 'security' THEN 'security'
        WHEN 'flows' THEN 'flows'
        ELSE 'webhook.other' END
$$;

-- Emission: the events of a statement are written by that statement, whichever path it is (the webhook receiver,
-- the workers' outcomes and statuses, cancel, requeue, campaigns, an app's own SQL), so no path can forget them and
-- no event exists without its fact. Statement-level triggers with transition tables: one INSERT … SELECT per
-- statement, never one per row; a statement that wrote events wakes the long polls and the endpoints' dispatch
-- (notify_events(), at commit). Every `data` carries schema_version (wa_outbox/events.py SCHEMA_VERSION). Both
-- triggers read only what the rows hold with operators that return NULL on a wrong shape, so no payload can fail
-- the statement that stores it.

-- The wake-up for the feed's long polls and the endpoints' dispatch: NOTIFY wa_outbox_events at commit, from at most
-- one transaction at a time. A transaction that notifies takes a lock that serializes the commits of every notifying
-- transaction of the cluster, WAL flush included (one notifying commit per fsync: measured 3x fewer commits/s for 8
-- concurrent writers), so a statement notifies only when no other transaction is about to: the first to take the
-- transaction-level advisory lock 77001818 (held until it ends) notifies, the others' events are read by the
-- readers it wakes or at the readers' next tick (every reader also polls, at least once a second: a transaction that
-- ends also moves the horizon without a notification). No event is ever missed by this: only a wake-up.
CREATE FUNCTION wa_outbox.notify_events() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF pg_try_advisory_xact_lock(77001818) THEN
        PERFORM pg_notify('wa_outbox_events', '');
    END IF;
END
$$;

-- A stored inbound message (message.received, or message.echo for smb_message_echoes) or change (one type per field,
-- event_type_of). Statuses are not events here: they become message.status through the timeline, once applied.
-- Only rows really inserted are in new_rows: a redelivered update (ON CONFLICT DO NOTHING) emits nothing again.
-- The body that could not be split at all (field 'unprocessable', stored dead: wa_outbox/webhooks.py) is not Meta's.
-- app_id through to_jsonb: the column comes with 0008_accounts, and this trigger must also run at revision 7.
CREATE FUNCTION wa_outbox.emit_webhook_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wa_outbox.events (type, phone_number_id, wa_id, data)
    SELECT CASE WHEN w.kind = 'change' THEN wa_outbox.event_type_of(w.field)
                WHEN p.echo THEN 'message.echo' ELSE 'message.received' END,
           w.phone_number_id,
           CASE WHEN w.kind = 'message' THEN CASE WHEN p.echo THEN p.m ->> 'to' ELSE p.m ->> 'from' END
                WHEN w.field = 'calls' THEN  -- the customer: whichever end is not the business number
                    CASE WHEN p.v -> 'calls' -> 0 ->> 'from' = p.v -> 'metadata' ->> 'display_phone_number'
                         THEN p.v -> 'calls' -> 0 ->> 'to' ELSE p.v -> 'calls' -> 0 ->> 'from' END
                WHEN w.field = 'user_preferences' THEN p.v -> 'user_preferences' -> 0 ->> 'wa_id' END,
           CASE WHEN w.kind = 'message' THEN jsonb_build_object(
                    'schema_version', 1, 'phone_number_id', w.phone_number_id,
                    'display_phone_number', p.v -> 'metadata' ->> 'display_phone_number', 'account_id', w.account_id,
                    'wa_id', CASE WHEN p.echo THEN p.m ->> 'to' ELSE p.m ->> 'from' END,
                    'contact', (SELECT c FROM jsonb_array_elements(
                                    CASE WHEN jsonb_typeof(p.v -> 'contacts') = 'array' THEN p.v -> 'contacts' END) c
                                WHERE c ->> 'wa_id' = p.m ->> CASE WHEN p.echo THEN 'to' ELSE 'from' END LIMIT 1),
                    'message', p.m, 'dedup_key', w.dedup_key, 'webhook_event_id', w.id,
                    'app_id', to_jsonb(w) -> 'app_id')
                ELSE jsonb_build_object(
                    'schema_version', 1, 'field', w.field, 'account_id', w.account_id,
                    'phone_number_id', w.phone_number_id, 'value', p.v, 'dedup_key', w.dedup_key,
                    'webhook_event_id', w.id, 'app_id', to_jsonb(w) -> 'app_id') END
    FROM new_rows w
    CROSS JOIN LATERAL (
        SELECT v, coalesce(v -> 'messages' -> 0, v -> 'message_echoes' -> 0) AS m,
               (w.field = 'smb_message_echoes' OR jsonb_typeof(v -> 'message_echoes') = 'array') AS echo
        FROM (SELECT w.payload -> 'value' AS v) value
    ) p
    WHERE w.kind IN ('message', 'change') AND w.field <> 'unprocessable'
    ORDER BY w.id;
    IF FOUND THEN
        PERFORM wa_outbox.notify_events();
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_events_emit AFTER INSERT ON wa_outbox.webhook_events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.emit_webhook_events();

-- The transitions of an outbound message an app acts on, one message.status each: sent (the send's answer, or a
-- status webhook that `reconciled` an unknown or re-queued send), delivered, read, played, failed (Meta's error),
-- dead (its reason and error), cancelled. Internal steps (queued, sending, retry_scheduled, throttled, released,
-- unknown, requeued, …) are not events. The message's row is read as the statement left it.
CREATE FUNCTION wa_outbox.emit_message_statuses() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wa_outbox.events (type, phone_number_id, wa_id, data)
    SELECT 'message.status', n.phone_number_id, n.recipient,
           jsonb_build_object(
               'schema_version', 1, 'outbox_id', n.id,
               'status', CASE WHEN t.event = 'reconciled' THEN 'sent' ELSE t.event END,
               'phone_number_id', n.phone_number_id, 'recipient', n.recipient,
               'wamid', coalesce(t.detail ->> 'wamid', n.wamid), 'correlation_id', n.correlation_id,
               'idempotency_key', n.idempotency_key, 'tracker', n.message ->> 'biz_opaque_callback_data',
               'campaign_id', n.campaign_id, 'attempt', t.attempt)
           || jsonb_strip_nulls(jsonb_build_object(
               'error', CASE WHEN t.event = 'failed'
                             THEN CASE WHEN n.status = 'failed' THEN n.last_error
                                       ELSE jsonb_build_object('errors', t.detail -> 'errors') END
                             WHEN t.event = 'dead' THEN n.last_error END,
               'reason', CASE WHEN t.event = 'dead' THEN t.detail ->> 'reason' END,
               'by', CASE WHEN t.event = 'cancelled' THEN t.detail ->> 'by' END))
    FROM new_rows t
    JOIN wa_outbox.notifications n ON n.id = t.notification_id
    WHERE t.event IN ('sent', 'reconciled', 'delivered', 'read', 'played', 'failed', 'dead', 'cancelled')
    -- A `reconciled` (sent) first: apply_statuses.sql writes it after the statuses that settled it.
    ORDER BY t.event <> 'reconciled', t.id;
    IF FOUND THEN
        PERFORM wa_outbox.notify_events();
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER notification_events_emit AFTER INSERT ON wa_outbox.notification_events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.emit_message_statuses();

-- An inbound event's feed event, for the Python handlers (WA_OUTBOX_INBOUND_HANDLERS get the same envelope as an
-- endpoint): one entry per message or change, none per status.
CREATE INDEX events_webhook_event ON wa_outbox.events (((data ->> 'webhook_event_id')::bigint))
    WHERE data ? 'webhook_event_id';

-- The feed, from any language: the events after `after` (a cursor this function returned; NULL: from the oldest
-- kept), at most max_rows, optionally only `types`, in feed order, each with its own cursor. A cursor is opaque to
-- callers; it is '<txid>-<seq>' of an event (wa_outbox/events.py reads and writes the same form). Only events below
-- the horizon are returned, so a reader that always passes the last cursor it got sees every event exactly once.
-- A cursor older than what retention kept (settings 'events_pruned_through', written by `wa-outbox prune`) raises
-- SQLSTATE WA410 with a message saying so; a string that is no cursor raises 22023.
--   SELECT * FROM wa_outbox.events_after(NULL, 100);
--   SELECT * FROM wa_outbox.events_after('741-12', 100, ARRAY['message.received']);
CREATE FUNCTION wa_outbox.events_after(after text DEFAULT NULL, max_rows integer DEFAULT 100,
                                       types text[] DEFAULT NULL)
RETURNS TABLE (cursor text, id text, type text, "timestamp" timestamptz, data jsonb)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    v_at text[];
    v_pruned text[];
    v_txid xid8 := '0';
    v_seq bigint := 0;
BEGIN
    IF max_rows IS NULL OR max_rows NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'max_rows must be between 1 and 10000, not %', coalesce(max_rows::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF after IS NOT NULL THEN
        v_at := regexp_match(after, '^([0-9]{1,18})-([0-9]{1,18})$');
        IF v_at IS NULL THEN
            RAISE EXCEPTION 'not a cursor of this feed: %', left(after, 80) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_txid := v_at[1]::xid8;
        v_seq := v_at[2]::bigint;
        SELECT regexp_match(s.value, '^([0-9]{1,18})-([0-9]{1,18})$') INTO v_pruned
        FROM wa_outbox.settings s WHERE s.key = 'events_pruned_through';
        IF v_pruned IS NOT NULL AND (v_txid, v_seq) < (v_pruned[1]::xid8, v_pruned[2]::bigint) THEN
            RAISE EXCEPTION 'events after cursor % were pruned: events are kept % days (WA_OUTBOX_EVENT_RETENTION_DAYS)',
                after, coalesce((SELECT s.value FROM wa_outbox.settings s WHERE s.key = 'event_retention_days'), '?')
                USING ERRCODE = 'WA410', HINT = 'read again without a cursor, from the oldest event kept';
        END IF;
    END IF;
    RETURN QUERY
    SELECT e.txid::text || '-' || e.seq::text, 'evt_' || e.seq::text, e.type, e.occurred_at, e.data
    FROM wa_outbox.events e
    WHERE (e.txid, e.seq) > (v_txid, v_seq) AND e.txid < wa_outbox.events_horizon()
      AND (types IS NULL OR e.type = ANY (types))
    ORDER BY e.txid, e.seq
    LIMIT max_rows;
END
$$;


-- == Endpoints ======================================================================================================
-- An app's receiver: events matching its filter are delivered to its URL, signed with its secret.
CREATE TABLE wa_outbox.endpoints (
    id                     text PRIMARY KEY CHECK (id ~ '^ep_[A-Za-z0-9]{8,64}$'),
    url                    text NOT NULL CHECK (length(url) BETWEEN 8 AND 2048),
    description            text,
    event_types            text[],            -- NULL: every type
    ordered                boolean NOT NULL DEFAULT false,  -- one conversation's events one at a time, in order
    state                  text NOT NULL DEFAULT 'enabled' CHECK (state IN ('enabled', 'disabled')),
    disabled_reason        text,              -- 'gone' (410), 'failing' (N days), 'operator'
    disabled_at            timestamptz,
    -- The signing secret (whsec_…), encrypted with WA_OUTBOX_SECRET_KEY (a Fernet token: never readable in a
    -- pg_dump), and during a rotation the previous one, which still signs until previous_secret_until.
    secret_enc             bytea NOT NULL,
    secret_fingerprint     text NOT NULL,
    previous_secret_enc    bytea,
    previous_secret_until  timestamptz,
    -- Dispatch position in the feed: events after (cursor_txid, cursor_seq) are still to be turned into deliveries.
    cursor_txid            xid8 NOT NULL DEFAULT '0',
    cursor_seq             bigint NOT NULL DEFAULT 0,
    failing_since          timestamptz,       -- the first failure since the last success
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    CHECK ((state = 'disabled') = (disabled_at IS NOT NULL))
);

-- One row per (endpoint, event) to deliver: a queue like notifications, drained by the workers.
CREATE TABLE wa_outbox.deliveries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id      text NOT NULL REFERENCES wa_outbox.endpoints (id) ON DELETE CASCADE,
    event_seq        bigint NOT NULL,         -- events.seq (no foreign key: prune deletes both by age)
    phone_number_id  text,                    -- the event's conversation, for ordered endpoints
    wa_id            text,
    status           text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'delivering', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    locked_by        text,
    locked_until     timestamptz,
    last_status_code integer,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    -- attempts as they were when the delivery was last replayed: the retry schedule starts again from there
    -- (attempts - replayed_after is where it is), while attempts go on numbering delivery_attempts.
    replayed_after   integer NOT NULL DEFAULT 0 CHECK (replayed_after >= 0),
    CONSTRAINT deliveries_endpoint_event UNIQUE (endpoint_id, event_seq),
    CHECK ((status = 'delivering') = (locked_until IS NOT NULL))
)
WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
-- The claim walks each enabled endpoint's due deliveries (a few per endpoint, fairly across endpoints) in its order,
-- (next_attempt_at, id): with id in the index it reads as many entries as it takes, not the whole backlog sorted.
CREATE INDEX deliveries_due ON wa_outbox.deliveries (endpoint_id, next_attempt_at, id) WHERE status = 'queued';
CREATE INDEX deliveries_leased ON wa_outbox.deliveries (locked_until) WHERE status = 'delivering';
-- Ordered endpoints: "is an earlier event of this conversation still to be delivered?" is one probe. Earlier is
-- a smaller id: one endpoint's deliveries are inserted in the feed's order, (txid, seq), by its dispatch.
CREATE INDEX deliveries_conversation ON wa_outbox.deliveries (endpoint_id, phone_number_id, wa_id, id)
    WHERE status IN ('queued', 'delivering');
CREATE INDEX deliveries_failed ON wa_outbox.deliveries (endpoint_id, id) WHERE status = 'failed';
-- Ordered endpoints: a delivery behind an earlier one of its conversation waits at next_attempt_at = 'infinity'
-- (out of the claim's way) until that one ends; the rescuer looks here for one whose wake-up was missed.
CREATE INDEX deliveries_held ON wa_outbox.deliveries (created_at)
    WHERE status = 'queued' AND next_attempt_at = 'infinity';

-- Every attempt: its answer's status code, latency and first bytes, for the operator.
CREATE TABLE wa_outbox.delivery_attempts (
    delivery_id    bigint NOT NULL REFERENCES wa_outbox.deliveries (id) ON DELETE CASCADE,
    attempt        integer NOT NULL CHECK (attempt > 0),
    endpoint_id    text NOT NULL,
    attempted_at   timestamptz NOT NULL DEFAULT now(),
    status_code    integer,                   -- NULL: no answer (timeout, connection refused, refused URL)
    latency_ms     double precision,
    response_head  text,                      -- the first bytes of the answer
    error          text,
    PRIMARY KEY (delivery_id, attempt)
);
CREATE INDEX delivery_attempts_endpoint ON wa_outbox.delivery_attempts (endpoint_id, attempted_at DESC);


-- == Accounts =======================================================================================================
-- A Meta app: its secret signs the webhooks Meta sends to its callback URL.
CREATE TABLE wa_outbox.meta_apps (
    app_id      text PRIMARY KEY CHECK (app_id ~ '^[0-9]{1,32}$'),
    name        text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- An app's secrets: one active (expires_at NULL), and during a rotation the previous one until its overlap ends.
CREATE TABLE wa_outbox.app_secrets (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id       text NOT NULL REFERENCES wa_outbox.meta_apps (app_id) ON DELETE CASCADE,
    secret_enc   bytea,                      -- a Fernet token under WA_OUTBOX_SECRET_KEY ...
    secret_ref   text,                       -- ... or the name of the environment variable that holds it
    fingerprint  text NOT NULL,              -- shown instead of the secret
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,                -- NULL: current; else verifies until then
    CHECK ((secret_enc IS NULL) <> (secret_ref IS NULL))
);
CREATE INDEX app_secrets_app ON wa_outbox.app_secrets (app_id);

-- A WhatsApp Business Account: it belongs to one app (its webhooks arrive signed by that app) and to one business
-- portfolio (whose messaging limit its numbers share).
CREATE TABLE wa_outbox.business_accounts (
    waba_id       text PRIMARY KEY CHECK (waba_id ~ '^[0-9]{1,32}$'),
    app_id        text NOT NULL REFERENCES wa_outbox.meta_apps (app_id),
    portfolio_id  text CHECK (portfolio_id ~ '^[0-9]{1,32}$'),
    name          text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- A business phone number that sends, and the access token it sends with. Its pacing is its rate_limits row.
CREATE TABLE wa_outbox.senders (
    phone_number_id       text PRIMARY KEY CHECK (phone_number_id ~ '^[0-9]{1,32}$'),
    waba_id               text NOT NULL REFERENCES wa_outbox.business_accounts (waba_id),
    alias                 text UNIQUE CHECK (alias ~ '^[A-Za-z][A-Za-z0-9_.-]{0,63}$'),
    display_phone_number  text,
    token_enc             bytea,             -- a Fernet token under WA_OUTBOX_SECRET_KEY ...
    token_ref             text,              -- ... or the name of the environment variable that holds it
    token_fingerprint     text,
    token_updated_at      timestamptz NOT NULL DEFAULT now(),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CHECK ((token_enc IS NULL) <> (token_ref IS NULL))
);
CREATE INDEX senders_waba ON wa_outbox.senders (waba_id);

-- The sender of a message, decided in one place for every enqueue path (enqueue, enqueue_many, enqueue_checked,
-- enqueue_campaign; the Python package and the HTTP API reach them): a phone number id is taken as given (one that
-- is not registered sends with WHATSAPP_ACCESS_TOKEN, as before the registry); an alias stands for its sender's
-- number, an unknown alias is refused; none given, the default (default_sender()).
-- The sender a message that names none goes from: the one `db upgrade` recorded (WHATSAPP_PHONE_NUMBER_ID), else the
-- only registered sender when there is exactly one, else NULL.
CREATE FUNCTION wa_outbox.default_sender() RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT s.value FROM wa_outbox.settings s
                     WHERE s.key = 'default_phone_number_id' AND s.value ~ '^[0-9]{1,32}$'),
                    (SELECT min(r.phone_number_id) FROM wa_outbox.senders r HAVING count(*) = 1));
END
$$;

-- The rule: `given` (a phone number id, an alias, or NULL) -> {phone number id, NULL} or {NULL, why it is refused}.
-- A pair rather than an exception, so a batch names the item it refuses (enqueue_many()).
-- PL/pgSQL, not SQL: a SQL function with sub-selects is never inlined, and each call parsed and planned its body
-- again (with default_sender()'s), ~0.4 ms of CPU per enqueue statement, half of a single enqueue's; PL/pgSQL keeps
-- its plans for the session.
CREATE FUNCTION wa_outbox.sender_choice(given text) RETURNS text[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_default text;
BEGIN
    IF given IS NULL THEN
        v_default := wa_outbox.default_sender();
        IF v_default IS NOT NULL THEN
            RETURN ARRAY[v_default, NULL];
        ELSIF EXISTS (SELECT FROM wa_outbox.senders) THEN
            RETURN ARRAY[NULL, 'several senders are registered and no default is set: give phone_number_id or '
                               'an alias'];
        END IF;
        RETURN ARRAY[NULL, 'no sender: pass phone_number_id or set WHATSAPP_PHONE_NUMBER_ID for wa-outbox'];
    ELSIF given ~ '^[0-9]{1,32}$' THEN
        RETURN ARRAY[given, NULL];
    ELSIF given ~ '^[A-Za-z][A-Za-z0-9_.-]{0,63}$' THEN
        RETURN coalesce((SELECT ARRAY[s.phone_number_id, NULL] FROM wa_outbox.senders s WHERE s.alias = given),
                        ARRAY[NULL, format('no sender has the alias %s: give a registered alias or a phone_number_id',
                                           given)]);
    END IF;
    RETURN ARRAY[NULL, '`phone_number_id` must be the numeric id of a business phone number'];
END
$$;

-- sender_choice() for one message: the phone number id, or invalid_parameter_value saying why not (a 400 from the
-- API, a one-line error from the CLI).
CREATE FUNCTION wa_outbox.resolve_sender(given text) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_choice text[] := wa_outbox.sender_choice(given);
BEGIN
    IF v_choice[2] IS NOT NULL THEN
        RAISE EXCEPTION '%', v_choice[2] USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v_choice[1];
END $$;
-- Every change to the registry wakes the web processes, which hold it in memory (registry_watch.py): an app added
-- or a secret rotated verifies webhooks within a second, whatever wrote it (the CLI, /v1, or plain SQL). Once per
-- statement, and Postgres folds identical notifications of one transaction into one.
CREATE FUNCTION wa_outbox.notify_registry_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('wa_outbox_registry', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER meta_apps_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wa_outbox.meta_apps
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.notify_registry_changed();
CREATE TRIGGER app_secrets_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wa_outbox.app_secrets
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.notify_registry_changed();
CREATE TRIGGER business_accounts_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wa_outbox.business_accounts
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.notify_registry_changed();
CREATE TRIGGER senders_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON wa_outbox.senders
    FOR EACH STATEMENT EXECUTE FUNCTION wa_outbox.notify_registry_changed();


-- == Portfolio limits ===============================================================================================
-- (0009_portfolio_limits)
-- A business portfolio's messaging limit (https://developers.facebook.com/docs/whatsapp/messaging-limits): how many
-- unique customers its numbers may reach with business-initiated messages outside a customer-service window in a
-- moving 24 hours, shared by every number of the portfolio (business_accounts.portfolio_id). Set by `wa-outbox
-- portfolios set`, PUT /v1/portfolios/<id> or a business_capability_update webhook. messaging_limit NULL: none is
-- enforced (and nothing is counted). `used`: the units of portfolio_units in the last 24 hours, kept by the claim
-- under this row's lock (claim_notifications.sql: a concurrent claim waits for the row and reads the new count,
-- which it could not from portfolio_units in its own snapshot); recounted exactly whenever the limit is set.
CREATE TABLE wa_outbox.portfolios (
    portfolio_id     text PRIMARY KEY CHECK (portfolio_id ~ '^[0-9]{1,32}$'),
    messaging_limit  integer CHECK (messaging_limit >= 0),
    used             integer NOT NULL DEFAULT 0 CHECK (used >= 0),
    limit_source     text NOT NULL DEFAULT 'operator' CHECK (limit_source IN ('operator', 'webhook')),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
-- The claims look for a limited portfolio first: with none, the budget costs one probe of this index.
CREATE INDEX portfolios_limited ON wa_outbox.portfolios (portfolio_id) WHERE messaging_limit IS NOT NULL;

-- One unit of a portfolio's limit: a customer counted (a template to them with no open window, not counted in the
-- 24 hours before), freed 24 hours after counted_at. The claim deletes a portfolio's freed units as it counts new
-- ones (one index range), so the table holds about the last 24 hours.
CREATE TABLE wa_outbox.portfolio_units (
    portfolio_id     text NOT NULL REFERENCES wa_outbox.portfolios (portfolio_id) ON DELETE CASCADE,
    wa_id            text NOT NULL,
    counted_at       timestamptz NOT NULL DEFAULT now(),
    notification_id  bigint
);
CREATE INDEX portfolio_units_customer ON wa_outbox.portfolio_units (portfolio_id, wa_id, counted_at);
CREATE INDEX portfolio_units_age ON wa_outbox.portfolio_units (portfolio_id, counted_at);

-- The messages the limit holds, per sender: a raised limit releases them in one statement (set_portfolio_limit.sql).
CREATE INDEX notifications_limit_held ON wa_outbox.notifications (phone_number_id)
    WHERE hold_reason = 'messaging_limit' AND status = 'queued';

-- The one rule of who counts (wa_outbox/messaging_limit.py counts_against_limit is the same; tests/db/
-- test_portfolio_limits.py drives both with the same cases): a template to a customer whose service window is not
-- open (no message from them in the 24 hours before `at`) and who has no unit of the portfolio younger than 24 hours.
CREATE FUNCTION wa_outbox.counts_against_limit(is_template boolean, last_inbound_at timestamptz,
                                               counted_at timestamptz, at timestamptz)
    RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(is_template, false)
           AND (last_inbound_at IS NULL OR last_inbound_at < at - interval '24 hours')
           AND (counted_at IS NULL OR counted_at <= at - interval '24 hours')
$$;

-- When a held message may go: when the portfolio's oldest unit frees (24 hours after it was counted); with no unit
-- to wait for (a limit of 0, or only units this very claim counted), 24 hours from `at`. wa_outbox/messaging_limit.py
-- next_unit_frees is the same.
CREATE FUNCTION wa_outbox.next_unit_frees(oldest_counted_at timestamptz, at timestamptz)
    RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(oldest_counted_at, at) + interval '24 hours'
$$;


-- == Templates ======================================================================================================
-- One row per template (a name in one language) of a business account, as Meta last told of it: the status, quality
-- and category webhooks (worker/_inbound.py, apply_template_changes.sql) and the sync from
-- GET /{waba-id}/message_templates. Meta's words are stored as sent (upper case); what a status means for the
-- messages of the template is decided in one place, wa_outbox/templates.py. A template with no row was never heard
-- of: its messages are sent as before. No foreign key to business_accounts: a webhook for a business account that is
-- not registered is still recorded (and its messages, from no registered sender, are never held by it).
CREATE TABLE wa_outbox.templates (
    waba_id             text NOT NULL CHECK (waba_id ~ '^[0-9]{1,32}$'),
    name                text NOT NULL CHECK (length(name) BETWEEN 1 AND 512),
    language            text NOT NULL CHECK (length(language) BETWEEN 1 AND 32),
    template_id         text CHECK (length(template_id) <= 64),     -- Meta's message_template_id
    status              text CHECK (length(status) <= 64),          -- APPROVED, PAUSED, DISABLED, PENDING, ...
    quality             text CHECK (length(quality) <= 64),         -- GREEN, YELLOW, RED, UNKNOWN
    category            text CHECK (length(category) <= 64),        -- MARKETING, UTILITY, AUTHENTICATION
    reason              text CHECK (length(reason) <= 2000),        -- Meta's reason for the last status
    -- a category change Meta announced before it takes effect (template_category_update with correct_category and
    -- category_update_timestamp): the category it will have, and when
    category_pending    text CHECK (length(category_pending) <= 64),
    category_change_at  timestamptz,
    components          jsonb,                                      -- from the sync: the template's components
    status_at           timestamptz,  -- when Meta changed the status (the webhook's time): an older word loses
    synced_at           timestamptz,  -- the last `templates sync` that saw it
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (waba_id, name, language)
);
-- The messages a template holds (hold_reason template_paused / template_not_approved), by sender and template name:
-- what an APPROVED webhook releases and a DISABLED one dead-letters (template_release.sql, template_dead.sql).
-- Partial: only held rows enter it, so the hot paths never write it.
CREATE INDEX notifications_template_held ON wa_outbox.notifications
    (phone_number_id, ((message -> 'template' ->> 'name')), id)
    WHERE hold_reason IN ('template_paused', 'template_not_approved');


-- == Number health ==================================================================================================
-- Phone number quality and throughput as Meta reports them (phone_number_quality_update, account_update webhooks),
-- one row per registered sender, and whether its pacing follows the throughput Meta grants it.
CREATE TABLE wa_outbox.number_health (
    phone_number_id         text PRIMARY KEY REFERENCES wa_outbox.senders (phone_number_id) ON DELETE CASCADE,
    quality_rating          text CHECK (quality_rating IN ('GREEN', 'YELLOW', 'RED', 'UNKNOWN')),
    previous_quality_rating text,         -- the rating before the last change of it (a drop: it was higher)
    quality_event           text,         -- the last phone_number_quality_update event: FLAGGED, UPGRADE, ...
    messaging_limit_tier    text,         -- as Meta names it: TIER_1K, TIER_UNLIMITED, ...
    messaging_limit         bigint,       -- the number the tier names (NULL: unlimited, not set or unknown)
    throughput_level        text,         -- STANDARD, HIGH, NOT_APPLICABLE
    throughput_mps          double precision CHECK (throughput_mps > 0),  -- what the level allows (80, 1000)
    flagged                 boolean NOT NULL DEFAULT false,
    restrictions            jsonb,        -- account_update ACCOUNT_RESTRICTION's restriction_info, as sent
    restricted_until        timestamptz,  -- the latest expiration among them (NULL with restrictions: no end given)
    ban_state               text,         -- account_update DISABLED_UPDATE's ban_info.waba_ban_state
    account_event           text,         -- the last account_update event: ACCOUNT_RESTRICTION, ACCOUNT_VIOLATION, ...
    violation_type          text,         -- account_update ACCOUNT_VIOLATION's violation_info.violation_type
    quality_changed_at      timestamptz,  -- when the last quality change applied was received
    account_changed_at      timestamptz,  -- ... and the last account change applied
    follow_meta_throughput  boolean NOT NULL DEFAULT false,  -- its rate_limits mps follows throughput_mps
    updated_at              timestamptz NOT NULL DEFAULT now()
);

-- Whether a number is restricted now (account_update ACCOUNT_RESTRICTION): restrictions recorded and none known to
-- have ended (no expiration given, or the latest one still ahead). Read by /metrics and the senders' listing.
CREATE FUNCTION wa_outbox.number_restricted(restrictions jsonb, restricted_until timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_array_length(CASE WHEN jsonb_typeof(restrictions) = 'array' THEN restrictions END), 0) > 0
           AND (restricted_until IS NULL OR restricted_until > now())
$$;


-- == Media ==========================================================================================================
-- One row per media object, either way. Inbound: one per media id a webhook carried (a redelivered webhook finds
-- its row and fetches nothing twice), a queue the workers drain like webhook_events. Outbound: one per file an app
-- handed over (POST /v1/media, wa_outbox.upload_media()), stored at once.
CREATE TABLE wa_outbox.media (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,   -- wa-outbox's own id
    direction        text NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    meta_media_id    text,                 -- inbound: the id as it arrived in the webhook
    phone_number_id  text,                 -- inbound: the business number that received it (its token fetches it)
    wa_id            text,                 -- inbound: the customer who sent it
    webhook_event_id bigint,               -- inbound: the message's webhook_events row
    wamid            text,                 -- inbound: the message that carried it
    kind             text CHECK (kind IN ('image', 'audio', 'video', 'document', 'sticker')),
    mime_type        text,
    filename         text,
    declared_sha256  text,                 -- as Meta said (the webhook's or the lookup's sha256)
    declared_size    bigint,               -- as Meta's lookup said (file_size)
    sha256           bytea,                -- of the bytes stored
    size             bigint CHECK (size >= 0),
    -- pending: to fetch; stored: its bytes are kept; failed: a final refusal (404, a checksum that never matched);
    -- expired: the id could no longer be fetched; too_large: refused by the size cap (recorded, never stored)
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'fetching', 'stored', 'failed', 'expired', 'too_large')),
    store            text CHECK (store IN ('postgres', 's3')),
    store_key        text,                 -- s3: the object's key under the bucket
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    -- inbound: Meta keeps a media id fetchable this long (7 days from the message), then the media is `expired`
    fetch_until      timestamptz,
    locked_by        text,
    locked_until     timestamptz,
    last_error       jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    stored_at        timestamptz,
    -- inbound: downloads whose bytes were not the ones Meta declared (sha256, size); `failed` at
    -- media_policy.MAX_CORRUPT_ATTEMPTS of them, whatever else the attempts met
    corrupt_fetches  integer NOT NULL DEFAULT 0 CHECK (corrupt_fetches >= 0),
    CHECK ((direction = 'inbound') = (meta_media_id IS NOT NULL))
);
CREATE UNIQUE INDEX media_meta_media_id ON wa_outbox.media (meta_media_id) WHERE direction = 'inbound';
CREATE INDEX media_due ON wa_outbox.media (next_attempt_at) WHERE state = 'pending';
CREATE INDEX media_leased ON wa_outbox.media (locked_until) WHERE state = 'fetching';
CREATE INDEX media_created_at ON wa_outbox.media (created_at);

-- The bytes of media kept in Postgres, in chunks (media_store.CHUNK_BYTES), so that neither a worker nor a web
-- process ever holds a whole file: it is written and read one chunk at a time.
CREATE TABLE wa_outbox.media_chunks (
    media_id  bigint NOT NULL REFERENCES wa_outbox.media (id) ON DELETE CASCADE,
    seq       integer NOT NULL CHECK (seq >= 0),
    data      bytea NOT NULL,
    PRIMARY KEY (media_id, seq)
);
ALTER TABLE wa_outbox.media_chunks ALTER COLUMN data SET STORAGE EXTERNAL;  -- already compressed, mostly

-- An outbound file as uploaded to Meta for one sender (POST /{phone-number-id}/media): Meta's media id, reused until
-- it expires (30 days), then uploaded again; another sender uploads its own.
CREATE TABLE wa_outbox.media_uploads (
    media_id         bigint NOT NULL REFERENCES wa_outbox.media (id) ON DELETE CASCADE,
    phone_number_id  text NOT NULL,
    meta_media_id    text NOT NULL,
    uploaded_at      timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (media_id, phone_number_id)
);

-- == Outbound media: messages naming an upload =====================================================================
-- A media message may name a file handed over to wa-outbox instead of a Meta media id or a link
-- ({"document": {"upload": 12, "filename": "invoice.pdf"}}): message_form_problem() checks its form; this trigger,
-- on every insert into the outbox (enqueue(), enqueue_many(), enqueue_checked(), campaigns), that it names a file
-- wa-outbox holds, of the kind the message sends, so a typo is refused at enqueue rather than dead at send. The WHEN
-- clause keeps every other message from calling the function. The file's row stays locked (FOR KEY SHARE) until the
-- message commits, so `prune` (prune_media_lock.sql) cannot delete a file between this check and that commit.
CREATE FUNCTION wa_outbox.check_message_upload() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_kind text := wa_outbox.message_type(NEW.message);
    v_upload text := NEW.message->v_kind->>'upload';
    v_found boolean := false;
    v_media_kind text;
    v_mime_type text;
BEGIN
    IF v_kind NOT IN ('image', 'audio', 'video', 'document', 'sticker') OR v_upload IS NULL THEN
        RETURN NEW;
    END IF;
    IF v_upload ~ '^[1-9][0-9]{0,17}$' THEN
        SELECT m.kind, m.mime_type INTO v_media_kind, v_mime_type FROM wa_outbox.media m
        WHERE m.id = v_upload::bigint AND m.direction = 'outbound' AND m.state = 'stored'
        FOR KEY SHARE OF m;
        v_found := FOUND;
    END IF;
    IF NOT v_found THEN
        RAISE EXCEPTION 'unknown upload %: no file with that id was handed over (POST /v1/media, upload_media())',
            v_upload USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_media_kind IS DISTINCT FROM v_kind THEN
        RAISE EXCEPTION 'upload %, % (%), cannot be sent in a message of type %', v_upload, v_mime_type,
            coalesce(v_media_kind, 'no kind Meta sends'), quote_literal(v_kind)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER notifications_check_upload BEFORE INSERT ON wa_outbox.notifications
    FOR EACH ROW WHEN (NEW.message @? '$.*.upload') EXECUTE FUNCTION wa_outbox.check_message_upload();
-- The messages naming each upload, whatever their status: `prune` keeps a file while any message names it
-- (prune_media_batch.sql), one index probe per file. Only messages naming an upload are in it.
CREATE INDEX notifications_upload ON wa_outbox.notifications ((message -> wa_outbox.message_type(message) ->> 'upload'))
    WHERE message @? '$.*.upload';


-- == Views for operations ===========================================================================================

-- The queues at a glance: one branch per state, each read from that state's partial index (a GROUP BY over
-- `status IN (...)` scanned the whole table, every finished message, on each /metrics scrape). The queued branch
-- reads notifications_queued_age alone.
CREATE VIEW wa_outbox.queue_health AS
SELECT 'notifications'::text AS queue, 'queued'::text AS status, count(*) AS rows,
       min(next_attempt_at) AS oldest_due, extract(epoch FROM now() - min(created_at)) AS oldest_age_seconds
FROM wa_outbox.notifications WHERE status = 'queued' HAVING count(*) > 0
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


-- == Grants =========================================================================================================
-- None: the migrations grant nothing (the test compares every ACL, so a GRANT in a migration belongs here too).
