-- Register an endpoint (wa-outbox endpoints add, POST /v1/endpoints); the caller validated the URL and the types and
-- encrypted the new secret (wa_outbox/endpoints.py).
-- Its dispatch position starts at the feed's present: (events_horizon(), 0). Every transaction below the horizon has
-- ended, so every event committed before this statement's snapshot with a txid below it is behind the endpoint; any
-- event committed after the endpoint exists comes from a transaction at or above the horizon, so it is ahead. An
-- event of a transaction above the horizon that committed just before may be delivered too: at least once, never
-- skipped (wa_outbox.events_horizon() owns that rule).
-- Not safe to repeat: a lost reply would leave a second endpoint under another id with another secret.
INSERT INTO wa_outbox.endpoints (id, url, description, event_types, ordered, secret_enc, secret_fingerprint,
                                 cursor_txid, cursor_seq)
VALUES (%(id)s, %(url)s, %(description)s, %(event_types)s::text[], %(ordered)s, %(secret_enc)s,
        %(secret_fingerprint)s, wa_outbox.events_horizon(), 0)
RETURNING id, url, description, event_types, ordered, state, disabled_reason, disabled_at, secret_fingerprint,
          previous_secret_until, failing_since, created_at, updated_at, 0::bigint AS pending, 0::bigint AS failed
