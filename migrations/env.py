"""Alembic environment: the database comes from DATABASE_URL (or the URL `wa-outbox db upgrade` passes in).

The migrations are how a database gets to the current schema; wa_outbox/sql/schema.sql is what the schema is, for a
reader. A new migration:
- is named for what it changes (`0006_ops_sessions`, not `0006_misc`): its revision id, its versions/ script and its
  sql/<revision>.up.sql and .down.sql share that name (the existing ones keep theirs: deployed databases know them);
- updates schema.sql in the same commit (the object as it now is, where a reader looks for it, and the file's
  `-- Revision:` line). tests/db/test_schema_file.py compares a database built from schema.sql with one migrated from
  empty, and fails, with a diff, until both agree;
- is cited by nothing: comments point at schema.sql (or the function or table), which says why.
"""

import sqlalchemy as sa
from alembic import context

from wa_outbox.config import Settings
from wa_outbox.db import SCHEMA, connect_options, sqlalchemy_url

config = context.config


def run_migrations_online() -> None:
    if config.attributes.get("database_url"):  # wa-outbox db upgrade (wa_outbox.migrate), or tests
        url, prepared = config.attributes["database_url"], config.attributes.get("prepared_statements", True)
    else:  # alembic run by hand with the checkout's alembic.ini: the environment, as every process reads it
        settings = Settings.from_env().require("database_url")
        url, prepared = settings.database_url, settings.db_prepared_statements
    engine = sa.create_engine(sqlalchemy_url(url), poolclass=sa.pool.NullPool,
                              connect_args=connect_options(prepared))
    with engine.connect() as connection:
        # Serialise concurrent `release` runs (two deploys at once) on a transaction-level advisory lock.
        connection.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext('wa_outbox.migrations'))")
        connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        context.configure(
            connection=connection,
            version_table="alembic_version",
            version_table_schema=SCHEMA,  # beside our tables, apart from the app's own alembic_version
            transactional_ddl=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run `wa-outbox db upgrade`")
run_migrations_online()
