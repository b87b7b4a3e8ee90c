-- A worker reserves send slots just before its claim, for the senders it claimed for last time, in a statement of its
-- own (wa_outbox.reserve_slots_ahead in schema.sql): the sender's rate_limits row is locked only for this short
-- transaction, not through the claim and its commit, so the claims of several workers for one sender run side by side.
-- Each sender's `unused` slots of this worker's last reservation (`reserved_at`) come back first if still the end of
-- its schedule. Senders in key order: two workers lock the same rows in the same order (no deadlocks).
-- Committed without waiting for its WAL flush (synchronous_commit off for this transaction only): a reservation only
-- matters through the claim that uses it, whose commit is flushed and lies later in the WAL, so a crash can lose a
-- reservation only together with every claim that used it. The lock is then held for the function alone.
-- Safe to repeat: a lost reply leaves slots no one uses (lost capacity, never a rate violation), and a refund applies
-- once (the first run moved the schedule's end on from `reserved_at`).
SELECT a.sender AS phone_number_id, g.granted, g.slots_from, g.level, g.refill, g.paused
FROM (SELECT set_config('synchronous_commit', 'off', true)) durability,
     LATERAL (SELECT * FROM unnest(%(senders)s::text[], %(wanted)s::integer[], %(unused)s::integer[],
                                   %(reserved_at)s::timestamptz[]) AS u(sender, wanted, unused, reserved_at)
              ORDER BY u.sender) a,
     LATERAL wa_outbox.reserve_slots_ahead(a.sender, a.wanted, %(default_mps)s, %(lead)s, %(horizon)s, a.unused,
                                           a.reserved_at) g
ORDER BY a.sender
