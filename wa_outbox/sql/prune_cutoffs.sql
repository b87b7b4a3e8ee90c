-- Retention: the cutoffs of one `wa-outbox prune` run, fixed at its start by the database's clock: finished messages
-- updated before `before`, dead ones (when asked) before `dead_before`, webhook dedup keys received before
-- `keys_before` (never less than 8 days: Meta redelivers for up to 7) and dead webhook events before
-- `dead_keys_before`.
-- Safe to repeat: it only reads.
SELECT now() - make_interval(days => %(days)s) AS before,
       now() - make_interval(days => %(dead_days)s) AS dead_before,  -- NULL (dead kept) when dead_days is NULL
       now() - make_interval(days => greatest(%(days)s, %(min_key_days)s)) AS keys_before,
       CASE WHEN %(dead_days)s::integer IS NOT NULL  -- greatest() would turn NULL into the minimum
            THEN now() - make_interval(days => greatest(%(dead_days)s, %(min_key_days)s)) END AS dead_keys_before
