-- Remove an endpoint (wa-outbox endpoints remove, DELETE /v1/endpoints/<id>): its deliveries and their attempts go
-- with it (ON DELETE CASCADE); nothing more is dispatched to it.
-- Safe to repeat: the second run finds nothing to delete.
DELETE FROM wa_outbox.endpoints WHERE id = %(id)s RETURNING id
