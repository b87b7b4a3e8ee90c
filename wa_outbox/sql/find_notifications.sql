-- Support: "was this message sent?" by recipient phone (digits) or correlation id, newest first.
-- Safe to repeat: a read.
SELECT n.id, n.status, n.recipient, n.attempts, n.wamid, n.correlation_id, n.created_at, n.updated_at,
       n.last_error ->> 'message' AS last_error
FROM wa_outbox.notifications n
WHERE n.recipient = %(recipient)s OR n.correlation_id = %(correlation_id)s
ORDER BY n.created_at DESC
LIMIT %(limit)s
