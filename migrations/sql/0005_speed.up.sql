-- Version 5: speed. One section per concern; each section's undo is in 0005_speed.down.sql, in reverse order.

-- == History flatness =================================================================================================
-- Claim + record cost per message must not grow with finished history (bench/history.py).
--
-- notifications: every page keeps 10 % free. A new message then never lands in the few bytes left on an old
-- history page (the free space map offers those holes to every INSERT: with 10 M messages of history, a claim read
-- and dirtied one cold page per such message), and the new versions its claim, record and status updates write
-- stay on its own page. Only new pages are filled this way: no rewrite, no lock beyond a moment's.
ALTER TABLE wa_outbox.notifications SET (fillfactor = 90);
-- contacts: each claim moves its recipients' pair_paced_until. With room on the row's page that update is HOT: no
-- new contacts_pkey entry (a cold index leaf dirtied, and split, per message) and no second heap page. The table is
-- rewritten once so that existing pages have that room (it locks contacts while it runs, a few seconds per million
-- contacts: README, Deploy). CLUSTER rather than VACUUM FULL, which cannot run in the migration's transaction; SET
-- WITHOUT CLUSTER: nothing should re-cluster it later.
ALTER TABLE wa_outbox.contacts SET (fillfactor = 80);
CLUSTER wa_outbox.contacts USING contacts_pkey;
ALTER TABLE wa_outbox.contacts SET WITHOUT CLUSTER;

-- == Ops queries ======================================================================================================
-- The /metrics scrape (queue_metrics.sql) and the queue_health view count and age the waiting queue from an index
-- alone: the view's queued branch read one heap row per queued message for its oldest created_at and due time
-- (100,000 queued: ~0.2-0.6 s). One entry per queued row (blocked or not); a row gets one when it is enqueued or
-- put back in the queue, none when it is claimed or finishes. An index-only scan skips the heap only for pages
-- VACUUM has marked all-visible (the visibility map); on pages it has not, it reads the row as before.
CREATE INDEX notifications_queued_age ON wa_outbox.notifications (created_at) INCLUDE (next_attempt_at)
    WHERE status = 'queued';
CREATE OR REPLACE VIEW wa_outbox.queue_health AS
SELECT 'notifications'::text AS queue, 'queued'::text AS status, count(*) AS rows,
       min(next_attempt_at) AS oldest_due, extract(epoch FROM now() - min(created_at)) AS oldest_age_seconds
FROM wa_outbox.notifications WHERE status = 'queued' HAVING count(*) > 0  -- notifications_queued_age alone
UNION ALL
SELECT 'notifications', 'sending', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'sending' HAVING count(*) > 0
UNION ALL
SELECT 'notifications', 'unknown', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'unknown' HAVING count(*) > 0
UNION ALL
SELECT 'notifications', 'dead', count(*), NULL, extract(epoch FROM now() - min(created_at))
FROM wa_outbox.notifications WHERE status = 'dead' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'queued', count(*), min(next_attempt_at), extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'queued' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'processing', count(*), NULL, extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'processing' HAVING count(*) > 0
UNION ALL
SELECT 'webhook_events', 'dead', count(*), NULL, extract(epoch FROM now() - min(received_at))
FROM wa_outbox.webhook_events WHERE status = 'dead' HAVING count(*) > 0;
-- The ops page's dead-letter groups (ops_dead_groups.sql) counted from the index alone: the planner takes an
-- index-only scan of an expression index only when the expression's column is in the index too (INCLUDE), else it
-- read each dead row from the heap (100,000 dead: ~0.4 s). Dead rows only, which are few and change seldom.
DROP INDEX wa_outbox.notifications_dead_code;
CREATE INDEX notifications_dead_code ON wa_outbox.notifications ((coalesce(last_error ->> 'code', '')), id)
    INCLUDE (last_error) WHERE status = 'dead';
-- The ops page's charts (ops_throughput.sql) find the timeline's last hour through its BRIN index on created_at, in
-- ranges of 16 pages instead of the default 128. Not every new event lands at the table's end: a small one fits in
-- the free space of an old page (what a full page had left over, what prune frees), and that range's summary then
-- reaches now, so the whole range is read for that one row. On 10 million messages with 100,000 queued, the hour's
-- 108,000 events came with 524,000 others read and thrown away in 128-page ranges, 72,000 in 16-page ones. Still a
-- BRIN index (no B-tree entry per event on the send path), of 8 times as many summaries: 770 kB at 10 million.
DROP INDEX wa_outbox.notification_events_created_at;
CREATE INDEX notification_events_created_at ON wa_outbox.notification_events USING brin (created_at)
    WITH (pages_per_range = 16, autosummarize = on);

-- == Claim and record =================================================================================================

-- == Bulk enqueue =====================================================================================================

-- == Webhook ingest ===================================================================================================

-- == Pacing ===========================================================================================================

-- Give back the pair-pacing reservations (contacts.pair_paced_until, a generic cell rate algorithm: each claim moves
-- it one interval per message) of claimed rows that go back unsent (given back before their send slot): the
-- recipient is then not held back by a send that never happened. Called by the worker before it records the rows
-- as released, while they are still `sending` under its lease (so none can be claimed again meanwhile); rows that
-- are not are skipped. Returns how many reservations were given back.
--
-- Safe only while no other claim for that recipient came after: each claim sets the time to
-- greatest(time, its now()) + k intervals, so taking back k intervals restores what the time would have been
-- without this claim (or later: never earlier) as long as the claims since were this one's statement (same now(),
-- same updated_at on its rows) or given back too. A message to the recipient updated after the claim (claimed later,
-- or anything else: it then keeps its reservation, the safe side) means no give-back. The recipients' rows are
-- locked first, in key order as the claim locks them, and checked in a second statement: its snapshot sees every
-- claim that moved the time before the lock was taken.
CREATE FUNCTION wa_outbox.return_pair_reservations(p_ids bigint[], p_worker text, p_interval double precision)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    returned integer;
BEGIN
    IF p_interval <= 0 THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM wa_outbox.contacts c
    WHERE (c.phone_number_id, c.wa_id) IN (SELECT n.phone_number_id, n.recipient FROM wa_outbox.notifications n
                                           WHERE n.id = ANY (p_ids) AND n.status = 'sending'
                                             AND n.locked_by = p_worker)
    ORDER BY c.phone_number_id, c.wa_id
    FOR UPDATE OF c;
    WITH given AS (
        SELECT n.phone_number_id, n.recipient, count(*) AS k, min(n.updated_at) AS claimed_at
        FROM wa_outbox.notifications n
        WHERE n.id = ANY (p_ids) AND n.status = 'sending' AND n.locked_by = p_worker
        GROUP BY n.phone_number_id, n.recipient
    ), back AS (
        UPDATE wa_outbox.contacts c
        SET pair_paced_until = c.pair_paced_until - make_interval(secs => g.k * p_interval)
        FROM given g
        WHERE c.phone_number_id = g.phone_number_id AND c.wa_id = g.recipient AND c.pair_paced_until IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM wa_outbox.notifications m
                          WHERE m.recipient = g.recipient AND m.phone_number_id = g.phone_number_id
                            AND m.updated_at > g.claimed_at AND NOT (m.id = ANY (p_ids)))
        RETURNING g.k
    )
    SELECT coalesce(sum(k), 0) INTO returned FROM back;
    RETURN returned;
END
$$;

SELECT 1;
