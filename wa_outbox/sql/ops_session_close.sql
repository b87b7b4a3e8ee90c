-- End one /ops session: logout, or a session whose token is no longer configured.
-- Safe to repeat: deleting a deleted row does nothing.
DELETE FROM wa_outbox.ops_sessions s WHERE s.id = %(id)s
