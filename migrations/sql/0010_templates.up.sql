-- Version 10: the template lifecycle (issue 20). What wa-outbox knows of each message template, kept current by
-- Meta's template webhooks and `wa-outbox templates sync`, and the index that finds the messages a template holds.
-- The words a held message is known by (hold_reason, template_held, template_released) came with 0009. The undo is
-- in 0010_templates.down.sql, in reverse order.

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
