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

-- == Campaigns: steering ===========================================================================================

-- == Metrics from the workers ======================================================================================

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

