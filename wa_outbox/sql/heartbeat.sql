-- A worker says it is alive (and what it is doing); monitoring alerts on stale heartbeats.
-- Safe to repeat: an upsert of the same values.
INSERT INTO wa_outbox.workers AS w (id, hostname, pid, state, info)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(state)s, %(info)s::jsonb)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), state = excluded.state, info = excluded.info
