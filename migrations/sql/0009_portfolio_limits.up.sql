-- Version 9: Meta's messaging limit per business portfolio (and, shared with 0010_templates, the words a held
-- message is known by). One section per concern; the undo is in 0009_portfolio_limits.down.sql, in reverse order.

-- == Messages: the outbox ===========================================================================================
-- Why a queued message waits without spending an attempt, when something other than its schedule holds it: the
-- portfolio's messaging limit is used up (it goes when a unit frees), or its template is paused or not approved (it
-- goes when the template is approved again). NULL: nothing holds it. wa_outbox/states.py's HoldReason.
ALTER TABLE wa_outbox.notifications ADD COLUMN hold_reason text
    CONSTRAINT notifications_hold_reason_check CHECK (hold_reason IN
    ('messaging_limit', 'template_paused', 'template_not_approved'));
-- The timeline's words for a hold: held by the messaging limit, held by its template, released by its template.
ALTER TABLE wa_outbox.notification_events DROP CONSTRAINT notification_events_event_check;
ALTER TABLE wa_outbox.notification_events ADD CONSTRAINT notification_events_event_check CHECK (event IN
    ('queued', 'sending', 'sent', 'retry_scheduled', 'throttled', 'sender_paused', 'pair_limited', 'unknown',
     'reconciled', 'released', 'delivered', 'read', 'played', 'failed', 'unrecognized_status', 'dead', 'requeued',
     'cancelled', 'limit_held', 'template_held', 'template_released')) NOT VALID;

-- == Portfolio limits ===============================================================================================
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
