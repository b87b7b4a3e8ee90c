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
