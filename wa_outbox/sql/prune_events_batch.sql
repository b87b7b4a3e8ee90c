-- Retention of the events feed: delete one bounded batch of the oldest events, a prefix of the feed (in (txid, seq)
-- order, up to the first event not older than
-- %(days)s days; only events below the horizon), with their
-- deliveries (their delivery_attempts go by ON DELETE CASCADE), and remember the newest position deleted
-- (settings 'events_pruned_through', with the retention in 'event_retention_days'), so that a reader whose cursor
-- is older is told so (events_after(): SQLSTATE WA410) instead of missing events silently. The candidates are the
-- first rows of the feed's index, so a batch costs what it deletes, not the table's size.
-- Safe to repeat: it deletes only what is past the retention; a second run deletes the next batch, or nothing.
WITH candidates AS (
    SELECT e.txid, e.seq, e.occurred_at
    FROM wa_outbox.events e
    WHERE e.txid < wa_outbox.events_horizon()
    ORDER BY e.txid, e.seq
    LIMIT %(limit)s
), stop AS (  -- the first event to keep: the prefix ends before it
    SELECT c.txid, c.seq FROM candidates c WHERE c.occurred_at >= now() - make_interval(days => %(days)s) ORDER BY c.txid, c.seq LIMIT 1
), victims AS (
    SELECT c.txid, c.seq FROM candidates c
    WHERE NOT EXISTS (SELECT 1 FROM stop) OR (c.txid, c.seq) < (SELECT s.txid, s.seq FROM stop s)
), deliveries AS (  -- (endpoint_id, event_seq) is the deliveries' unique index: one probe per endpoint and event
    DELETE FROM wa_outbox.deliveries d
    WHERE d.endpoint_id = ANY (ARRAY(SELECT p.id FROM wa_outbox.endpoints p))
      AND d.event_seq = ANY (ARRAY(SELECT v.seq FROM victims v))
    RETURNING 1
), deleted AS (
    DELETE FROM wa_outbox.events e WHERE e.seq = ANY (ARRAY(SELECT v.seq FROM victims v))
    RETURNING e.txid, e.seq
), newest AS (
    SELECT d.txid, d.seq FROM deleted d ORDER BY d.txid DESC, d.seq DESC LIMIT 1
), remembered AS (
    INSERT INTO wa_outbox.settings AS s (key, value)
    SELECT 'events_pruned_through', n.txid::text || '-' || n.seq::text FROM newest n
    UNION ALL
    SELECT 'event_retention_days', %(days)s::text FROM newest
    ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = now()
    WHERE s.key <> 'events_pruned_through'  -- the position only moves forward (two runs at once)
       OR (split_part(s.value, '-', 1)::xid8, split_part(s.value, '-', 2)::bigint)
          < (split_part(excluded.value, '-', 1)::xid8, split_part(excluded.value, '-', 2)::bigint)
)
SELECT (SELECT count(*) FROM deleted) AS events, (SELECT count(*) FROM deliveries) AS deliveries,
       (SELECT count(*) FROM candidates) >= %(limit)s AND NOT EXISTS (SELECT 1 FROM stop) AS more
