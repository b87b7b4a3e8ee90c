-- Retention of media, step 1 of 2 in one transaction (prune_media_batch.sql is step 2): lock one bounded batch of the
-- oldest media rows older than %(days)s days, whatever their state but `fetching` (a worker holds it), skipping rows
-- others hold: a worker's, or an enqueue's check of the file a new message names (check_message_upload(), FOR KEY
-- SHARE until that message commits). An outbound file (an upload) goes only once no message names it: that is
-- checked in step 2, in a snapshot taken after these locks, so a message committed meanwhile is seen, and one
-- enqueued after them waits for this transaction and then finds no file (refused, never sent without it).
-- after_at, after_id: the created_at and id the previous batch ended at (files still named stay, and are passed over).
-- Safe to repeat: it only locks.
SELECT m.id, m.created_at
FROM wa_outbox.media m
WHERE m.state <> 'fetching' AND m.created_at < now() - make_interval(days => %(days)s)
  AND (m.created_at, m.id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
ORDER BY m.created_at, m.id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
