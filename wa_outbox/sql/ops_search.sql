-- The ops page's search box: a message by id, recipient phone number, correlation id or wamid, newest first. Each
-- alternative has its own index (primary key, notifications_recipient, notifications_correlation_id,
-- notifications_wamid); a NULL parameter matches nothing.
-- Safe to repeat: a read.
SELECT n.id, n.status, n.recipient, n.phone_number_id, n.attempts, n.wamid, n.correlation_id, n.created_at,
       n.updated_at, n.last_error ->> 'message' AS last_error
FROM wa_outbox.notifications n
WHERE n.id = %(id)s::bigint OR n.recipient = %(recipient)s::text OR n.correlation_id = %(term)s::text
   OR n.wamid = %(term)s::text
ORDER BY n.created_at DESC
LIMIT %(limit)s
