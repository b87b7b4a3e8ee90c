-- `wa-outbox db downgrade base` removes every wa-outbox object: after the last revision is undone, alembic's version
-- table (which lives in the wa_outbox schema) is empty; drop it and the schema, unless something else is still there.
-- Safe to repeat: guarded by existence; a second run finds nothing to drop.
DO $$
BEGIN
    IF to_regclass('wa_outbox.alembic_version') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM wa_outbox.alembic_version) THEN
        DROP TABLE wa_outbox.alembic_version;
    END IF;
    DROP SCHEMA IF EXISTS wa_outbox;
EXCEPTION WHEN dependent_objects_still_exist THEN
    NULL;  -- something not wa-outbox's lives in the schema: leave it
END
$$
