-- A worker stopping cleanly removes its heartbeat row; rows of workers silent for a day are forgotten.
-- Safe to repeat: a delete by key.
DELETE FROM wa_outbox.workers WHERE id = %(worker_id)s OR heartbeat_at < now() - interval '1 day'
