-- The feed (GET /v1/events, `wa-outbox events tail`): one page of events after a cursor, through
-- wa_outbox.events_after(), the reader SQL callers use too, so there is one gap-free rule. seq is the event's id
-- as a number, for the one renderer of envelopes (wa_outbox/events.py).
-- Safe to repeat: it only reads.
SELECT f.cursor, substr(f.id, 5)::bigint AS seq, f.type, f."timestamp", f.data
FROM wa_outbox.events_after(%(after)s, %(limit)s, %(types)s::text[]) f
