-- The dead-letter queue, newest first, keyset-paginated by id: messages that went `dead` here, and those Meta
-- accepted and then reported `failed` (their last_error carries Meta's code and title). `status` says which.
-- Safe to repeat: a read.
SELECT n.id, n.status, n.recipient, n.phone_number_id, n.attempts, n.last_error, n.correlation_id, n.created_at,
       n.updated_at AS died_at
FROM wa_outbox.notifications n
WHERE n.status IN ('dead', 'failed') AND (%(before_id)s::bigint IS NULL OR n.id < %(before_id)s)
  AND (%(code)s::integer IS NULL OR (n.last_error ->> 'code')::integer = %(code)s)
ORDER BY n.id DESC
LIMIT %(limit)s
