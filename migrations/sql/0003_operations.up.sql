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

