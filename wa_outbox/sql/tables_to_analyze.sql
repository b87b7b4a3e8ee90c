-- Queue tables whose statistics the planner lacks or has outgrown, where autovacuum has not analyzed them (it is
-- off, or has not come by yet): the hot paths' plans depend on them (worker/_analyzer.py).
-- * never analyzed and holding rows;
-- * or changed by more rows since their last analysis than they held then, and by at least %(min_changes)s: a table
--   analyzed nearly empty (a new deployment, a bench's truncated tables) that filled up since. A statement prepared
--   meanwhile keeps a plan made for a few rows: the deliveries' record statement probed the whole table for each
--   outcome (a sequential scan), its cost growing with the table (bench/deliveries.py, autovacuum off). ANALYZE
--   replaces the statistics and, with them, every cached plan that read them. Autovacuum's own threshold (50 rows
--   and a fiftieth of the table, these tables' autovacuum_analyze_scale_factor) is far lower: where it runs, this is
--   rarely true.
-- Safe to repeat: a read.
SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = 'wa_outbox'
  AND s.relname IN ('notifications', 'webhook_events', 'events', 'deliveries', 'delivery_attempts')
  AND CASE WHEN s.last_analyze IS NULL AND s.last_autoanalyze IS NULL THEN s.n_live_tup + s.n_dead_tup > 0
           ELSE s.n_mod_since_analyze >= greatest(%(min_changes)s, c.reltuples) END
ORDER BY s.relname
