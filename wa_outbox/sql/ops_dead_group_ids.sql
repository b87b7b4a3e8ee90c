-- The ops page's retry and purge of a whole dead-letter group: the group's ids, newest first, in batches (keyset on
-- id), no newer than the newest the operator saw, so an action covers what was shown and nothing that died since.
-- Safe to repeat: a read.
SELECT n.id
FROM wa_outbox.notifications n
WHERE n.status = 'dead' AND coalesce(n.last_error ->> 'code', '') = %(code)s
  AND n.id <= %(up_to_id)s AND n.id < coalesce(%(before_id)s::bigint, 9223372036854775807)
ORDER BY n.id DESC
LIMIT %(limit)s
