-- The applied migration (fails with undefined_table when wa-outbox's schema was never migrated).
-- Safe to repeat: a read.
SELECT version_num FROM wa_outbox.alembic_version
