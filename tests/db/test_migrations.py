"""Migrations upgrade and downgrade cleanly, on a database that holds data."""

from __future__ import annotations

import psycopg
import pytest

from tests.conftest import _with_dbname, create_scratch_database, drop_database
from wa_outbox import migrate

TABLES = {"settings", "notifications", "notification_events", "webhook_events", "contacts", "rate_limits", "workers",
          "campaigns", "ops_sessions"}


@pytest.fixture
def scratch_url(server_url):
    name = create_scratch_database(server_url, prefix="wa_outbox_migrations")
    yield _with_dbname(server_url, name)
    drop_database(server_url, name)


def _objects(url: str) -> tuple[set[str], set[str], set[str]]:
    with psycopg.connect(url) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'wa_outbox' "
            "AND table_type = 'BASE TABLE'")}
        views = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.views WHERE table_schema = 'wa_outbox'")}
        functions = {r[0] for r in conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'wa_outbox'")}
    return tables, views, functions


def _fill(url: str) -> None:
    """A row in every table (again, at a later revision: the same rows are skipped, a new message is added)."""
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO wa_outbox.settings VALUES ('default_phone_number_id', '123') ON CONFLICT DO NOTHING")
        conn.execute("""SELECT wa_outbox.enqueue('+5511987654321', '{"type":"text","text":{"body":"x"}}')""")
        conn.execute("INSERT INTO wa_outbox.webhook_events (dedup_key, field, kind, payload) "
                     "VALUES ('m:w', 'messages', 'message', '{}') ON CONFLICT DO NOTHING")
        conn.execute("INSERT INTO wa_outbox.contacts (phone_number_id, wa_id) VALUES ('123', '5511987654321') "
                     "ON CONFLICT DO NOTHING")
        conn.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens) "
                     "VALUES ('123', 80, 80, 80) ON CONFLICT DO NOTHING")
        conn.execute("INSERT INTO wa_outbox.workers (id, hostname, pid) VALUES ('w', 'h', 1) ON CONFLICT DO NOTHING")


def test_upgrade_creates_the_whole_model_and_downgrade_removes_it_with_data_present(scratch_url):
    migrate.upgrade(scratch_url)
    tables, views, functions = _objects(scratch_url)
    assert TABLES <= tables
    assert {"notification_timeline", "queue_health"} <= views
    assert "enqueue" in functions
    _fill(scratch_url)

    migrate.downgrade(scratch_url, "base")
    tables, views, functions = _objects(scratch_url)
    assert tables == {"alembic_version"} and not views and not functions

    migrate.upgrade(scratch_url)  # and back up again, then once more as a no-op
    migrate.upgrade(scratch_url)
    _fill(scratch_url)
    with psycopg.connect(scratch_url) as conn:
        assert conn.execute("SELECT version_num FROM wa_outbox.alembic_version").fetchone()[0] == migrate.head()
        assert conn.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 1


def test_each_revision_downgrades_and_upgrades_again_with_data_present(scratch_url):
    """Step by step: every revision's down undoes its up on a database that holds rows written at that revision."""
    revisions = migrate.revisions()
    for revision in revisions:
        migrate.upgrade(scratch_url, revision)
        _fill(scratch_url)
    for previous in reversed(["base", *revisions[:-1]]):
        migrate.downgrade(scratch_url, previous)
    migrate.upgrade(scratch_url)
    _fill(scratch_url)
    with psycopg.connect(scratch_url) as conn:
        assert conn.execute("SELECT count(*) FROM wa_outbox.notifications").fetchone()[0] == 1


def test_migrations_leave_the_apps_own_tables_alone(scratch_url):
    with psycopg.connect(scratch_url) as conn:
        conn.execute("CREATE TABLE public.orders (id int primary key)")
        conn.execute("CREATE TABLE public.alembic_version (version_num varchar(32) primary key)")
        conn.execute("INSERT INTO public.alembic_version VALUES ('app_rev_1')")
    migrate.upgrade(scratch_url)
    migrate.downgrade(scratch_url, "base")
    with psycopg.connect(scratch_url) as conn:
        assert conn.execute("SELECT version_num FROM public.alembic_version").fetchone()[0] == "app_rev_1"
        assert conn.execute("SELECT to_regclass('public.orders')").fetchone()[0] == "orders"


def _limits(url: str) -> dict[str, list]:
    with psycopg.connect(url) as conn:
        return {
            "notifications": [r[0] for r in conn.execute(
                "SELECT max_attempts FROM wa_outbox.notifications ORDER BY id")],
            "webhook_events": [r[0] for r in conn.execute(
                "SELECT max_attempts FROM wa_outbox.webhook_events ORDER BY id")],
        }


def test_0006_hands_version_1_attempt_limits_back_to_the_policy(scratch_url):
    """Version 1 wrote max_attempts = 10 into every row; version 2 made NULL mean WA_OUTBOX_MAX_ATTEMPTS but left
    those rows at 10. 0006 sets them NULL, whatever their status (a dead or failed one can be requeued), and keeps
    a limit someone set by hand."""
    migrate.upgrade(scratch_url, "0001_initial_schema")
    _fill(scratch_url)  # a queued message and a webhook event, as version 1 enqueued them
    with psycopg.connect(scratch_url) as conn:
        for status in ("dead", "sent", "failed"):
            conn.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, "
                         "status, attempts) VALUES ('123', '5511987654321', '{}', 'h', %s, 10)", (status,))
    migrate.upgrade(scratch_url, "0005_speed")
    with psycopg.connect(scratch_url) as conn:
        conn.execute("UPDATE wa_outbox.notifications SET max_attempts = 3 WHERE status = 'failed'")  # by hand
        conn.execute("""SELECT wa_outbox.enqueue('+5511987654322', '{"type":"text","text":{"body":"y"}}')""")
    assert _limits(scratch_url) == {"notifications": [10, 10, 10, 3, None], "webhook_events": [10]}

    migrate.upgrade(scratch_url, "0006_ops_sessions_max_attempts")
    assert _limits(scratch_url) == {"notifications": [None, None, None, 3, None], "webhook_events": [None]}


def test_0006_downgrades_with_sessions_and_messages_present(scratch_url):
    migrate.upgrade(scratch_url)
    _fill(scratch_url)
    with psycopg.connect(scratch_url) as conn:
        conn.execute("INSERT INTO wa_outbox.ops_sessions (id, token_fingerprint, expires_at) "
                     "VALUES (sha256('s'), sha256('t'), now() + interval '12 hours')")
    migrate.downgrade(scratch_url, "0005_speed")
    tables, _, _ = _objects(scratch_url)
    assert "ops_sessions" not in tables and TABLES - {"ops_sessions"} <= tables
    assert _limits(scratch_url) == {"notifications": [None], "webhook_events": [None]}  # still the policy's
    migrate.upgrade(scratch_url)
    assert "ops_sessions" in _objects(scratch_url)[0]
