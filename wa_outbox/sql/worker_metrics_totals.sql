-- For /metrics at scrape time: the workers' counters and latency buckets summed over every worker, running, gone
-- uncleanly, and retired.
-- Safe to repeat: a read.
SELECT metric, labels, sum(value) AS value FROM wa_outbox.worker_metrics GROUP BY metric, labels
