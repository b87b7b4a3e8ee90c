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

-- == Claim and record =================================================================================================

-- == Bulk enqueue =====================================================================================================

-- == Webhook ingest ===================================================================================================

-- == Pacing ===========================================================================================================

SELECT 1;
