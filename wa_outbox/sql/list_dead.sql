-- The dead-letter queue, newest first, keyset-paginated by id.
-- Safe to repeat: a read.
SELECT n.id, n.recipient, n.phone_number_id, n.attempts, n.last_error, n.correlation_id, n.created_at,
       n.updated_at AS died_at
FROM wa_outbox.notifications n
WHERE n.status = 'dead' AND (%(before_id)s::bigint IS NULL OR n.id < %(before_id)s)
  AND (%(code)s::integer IS NULL OR (n.last_error ->> 'code')::integer = %(code)s)
ORDER BY n.id DESC
LIMIT %(limit)s
