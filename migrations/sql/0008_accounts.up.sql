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

-- reserve_slots_set() (issue 19's many senders): reserve_slots() for several senders at once, in one statement
-- (the claim serves many senders per batch: one function call, one UPDATE, instead of one of each per sender).
-- The same rule, for each sender of `senders` (distinct) wanting the matching count of `wants`: creates missing
-- buckets at the default rate, locks the senders' rows in key order (two claims lock the same rows in the same
-- order: no deadlocks), reads the time after the locks are taken, and writes only the schedules that granted
-- something. One row per sender, in key order.
CREATE FUNCTION wa_outbox.reserve_slots_set(senders text[], wants integer[], default_mps double precision,
                                            lead double precision, horizon double precision)
    RETURNS TABLE (phone_number_id text, granted integer, slots_from timestamptz, level double precision,
                   refill double precision, paused boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens, refilled_at)
    SELECT u.s, default_mps, NULL, (wa_outbox.bucket_shape(default_mps, NULL)).capacity, clock_timestamp()
    FROM unnest(senders) AS u(s)
    WHERE NOT EXISTS (SELECT 1 FROM wa_outbox.rate_limits r WHERE r.phone_number_id = u.s)
    ORDER BY u.s
    ON CONFLICT (phone_number_id) DO NOTHING;
    RETURN QUERY
    WITH locked AS MATERIALIZED (
        SELECT r.phone_number_id AS sender, r.mps, r.burst, r.tokens, r.refilled_at, r.paused_until, u.n AS wanted
        FROM wa_outbox.rate_limits r JOIN unnest(senders, wants) AS u(s, n) ON u.s = r.phone_number_id
        ORDER BY r.phone_number_id FOR UPDATE OF r
    ), timed AS MATERIALIZED (  -- the earliest slot, read after the locks
        SELECT l.*, sh.refill AS rate, sh.capacity,
               clock_timestamp() + make_interval(secs => least(lead, 1 / sh.refill)) AS t
        FROM locked l, wa_outbox.bucket_shape(l.mps, l.burst) sh
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

-- reserve_slots() is reserve_slots_set() for one sender (one owner of the rule).
CREATE OR REPLACE FUNCTION wa_outbox.reserve_slots(sender text, wanted integer, default_mps double precision,
                                        lead double precision, horizon double precision,
                                        OUT granted integer, OUT slots_from timestamptz, OUT level double precision,
                                        OUT refill double precision, OUT paused boolean)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT g.granted, g.slots_from, g.level, g.refill, g.paused INTO granted, slots_from, level, refill, paused
    FROM wa_outbox.reserve_slots_set(ARRAY[sender], ARRAY[wanted], default_mps, lead, horizon) g;
END $$;
