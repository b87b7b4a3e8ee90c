-- Version 8: many numbers, business accounts and Meta apps in one deployment. The registry: Meta apps and their
-- secrets (webhook signatures), business accounts (WABAs) and the portfolio that owns them, sender numbers and
-- their access tokens. Secrets are stored encrypted with WA_OUTBOX_SECRET_KEY (Fernet tokens: a pg_dump holds
-- nothing usable) or as the name of an environment variable resolved when used (`--token-ref`), never in clear.
-- Today's single-number environment (WHATSAPP_ACCESS_TOKEN, WHATSAPP_APP_SECRET, WHATSAPP_PHONE_NUMBER_ID) is a
-- registry of one that lives in the environment, not in these tables.
-- One section per concern; each section's undo is in 0008_accounts.down.sql, in reverse order.

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

-- The app whose secret verified a webhook POST (NULL: the environment's WHATSAPP_APP_SECRET).
ALTER TABLE wa_outbox.webhook_events ADD COLUMN app_id text;

-- Many senders: the claim walks the senders with queued rows in key order and takes each one's due rows, as many
-- as it has send slots for (claim_notifications.sql), so a sender with a long backlog and no free slot does not
-- hold the others back. One index range per sender and priority. (Built in this transaction: on a large table,
-- a partial index of the queued rows still reads the whole table once.)
CREATE INDEX notifications_sender_due ON wa_outbox.notifications (phone_number_id, priority, next_attempt_at)
    WHERE status = 'queued' AND NOT blocked;
