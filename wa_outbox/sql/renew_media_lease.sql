-- A fetch still downloading keeps its media: its lease is renewed every third of a lease (worker/_media.py), so a
-- slow 100 MB download needs no long lease, and a worker that dies mid-download leaves its row to the rescuer soon.
-- Safe to repeat: guarded by locked_by and the state; it only moves the lease's end.
UPDATE wa_outbox.media m
SET locked_until = now() + make_interval(secs => %(lease_seconds)s)
WHERE m.id = %(id)s AND m.locked_by = %(worker_id)s AND m.state = 'fetching'
RETURNING m.id
