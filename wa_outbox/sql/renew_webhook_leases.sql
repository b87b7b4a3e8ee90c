-- Extend this worker's lease on the events of its batch that it still holds, while slow application handlers run,
-- so the rescuer does not hand them to another worker mid-batch (a handler would then run twice at once). Returns
-- the ids still held: an event missing from the answer was rescued (its lease lapsed) and is no longer ours.
-- Safe to repeat: guarded by status and lease owner; a repeat only sets the same lease again.
UPDATE wa_outbox.webhook_events w
SET locked_until = now() + make_interval(secs => %(lease_seconds)s)
WHERE w.id = ANY (%(ids)s::bigint[]) AND w.status = 'processing' AND w.locked_by = %(worker_id)s
RETURNING w.id
