-- Version 7: events for apps. Every fact wa-outbox records becomes an event, written in the same transaction as the
-- fact; apps read them from a feed that never skips (GET /v1/events, wa_outbox.events_after()) or have them pushed
-- to their endpoints, signed as the Standard Webhooks specification says (https://www.standardwebhooks.com/).
-- One section per concern; each section's undo is in 0007_events.down.sql, in reverse order.

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
    CONSTRAINT deliveries_endpoint_event UNIQUE (endpoint_id, event_seq),
    CHECK ((status = 'delivering') = (locked_until IS NOT NULL))
)
WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
-- The claim walks each enabled endpoint's due deliveries (a few per endpoint, fairly across endpoints).
CREATE INDEX deliveries_due ON wa_outbox.deliveries (endpoint_id, next_attempt_at) WHERE status = 'queued';
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
