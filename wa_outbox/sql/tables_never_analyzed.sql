-- Queue tables Postgres has no statistics for yet (autovacuum has not come by, or is off): the claim's plan
-- depends on them.
-- Safe to repeat: a read.
SELECT relname FROM pg_stat_user_tables
WHERE schemaname = 'wa_outbox' AND relname IN ('notifications', 'webhook_events')
  AND last_analyze IS NULL AND last_autoanalyze IS NULL AND n_live_tup + n_dead_tup > 0
