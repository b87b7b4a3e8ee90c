"""`wa-outbox db query` without --write is read-only in fact: every statement that changes something although a READ
ONLY transaction lets it (large objects, signals, server reload, locks, session settings, sequences, COPY TO
PROGRAM, ...) is refused before it runs, with nothing changed; the README's support queries still work; and the role
`db support-role` makes reads the wa_outbox views only (real Postgres, click's runner)."""

from __future__ import annotations

import os
import tempfile
import uuid

import psycopg
import pytest

from tests.db.test_cli import make_dead


def refused(result) -> bool:
    lines = result.output.strip().splitlines()
    return (result.exit_code != 0 and len(lines) == 1 and "Traceback" not in result.output
            and lines[0].startswith("wa-outbox: refused, nothing was run: "))


@pytest.fixture
def message(run, db) -> int:
    nid = int(run("send", "--to", "+5511987654321", "--text", "x", "--correlation-id", "req-abc").output.split("\t")[0])
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens) VALUES ('1', 5, 5, 5)")
    return nid


def large_objects(db) -> int:
    return db.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0]


def test_statements_a_read_only_transaction_still_runs_are_refused_and_change_nothing(run, db, message):
    objects = large_objects(db)
    sequence = db.execute("SELECT pg_get_serial_sequence('wa_outbox.notifications', 'id')").fetchone()[0]
    last_value = db.execute(f"SELECT last_value FROM {sequence}").fetchone()[0]
    for sql in ["SELECT lo_from_bytea(0, 'data')", "SELECT * FROM lo_from_bytea(0, 'data')",
                "SELECT pg_catalog.lo_create(0)", "SELECT lo_import('/etc/hostname')",
                f"SELECT nextval('{sequence}')", "SELECT set_config('wa_outbox.allow_prune', 'on', false)",
                "SELECT pg_advisory_lock(1)", "SELECT pg_reload_conf()",
                "SELECT pg_terminate_backend(pg_backend_pid())",
                "SELECT query_to_xml('DELETE FROM wa_outbox.rate_limits', true, true, '')",
                "LOCK TABLE wa_outbox.notifications IN ACCESS EXCLUSIVE MODE",
                "SELECT id FROM wa_outbox.notifications FOR UPDATE",
                "SELECT * FROM (SELECT id FROM wa_outbox.notifications FOR SHARE) AS locked",
                "WITH gone AS (DELETE FROM wa_outbox.rate_limits RETURNING *) SELECT count(*) FROM gone",
                "EXPLAIN ANALYZE DELETE FROM wa_outbox.rate_limits",
                "EXPLAIN (ANALYZE true) SELECT lo_from_bytea(0, 'data')",
                "SELECT * INTO wa_outbox.copied FROM wa_outbox.rate_limits",
                "DELETE FROM wa_outbox.rate_limits", "SET wa_outbox.allow_prune = 'on'", "COMMIT"]:
        r = run("db", "query", sql)
        assert refused(r), (sql, r.output)
    assert large_objects(db) == objects
    assert db.execute(f"SELECT last_value FROM {sequence}").fetchone()[0] == last_value
    assert db.execute("SELECT count(*) FROM wa_outbox.rate_limits").fetchone()[0] == 1
    assert db.execute("SELECT to_regclass('wa_outbox.copied')").fetchone()[0] is None
    several = run("db", "query", "SELECT 1; SELECT lo_from_bytea(0, 'data')")
    assert several.exit_code != 0 and "exactly one statement" in several.output
    assert large_objects(db) == objects


def test_lo_unlink_and_pg_terminate_backend_of_another_session_are_refused(run, db, server_url):
    oid = db.execute("SELECT lo_from_bytea(0, 'kept')").fetchone()[0]
    try:
        with psycopg.connect(server_url, autocommit=True) as other:
            pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
            for sql in (f"SELECT lo_unlink({oid})", f"SELECT pg_terminate_backend({pid})",
                        f"SELECT pg_cancel_backend({pid})"):
                assert refused(r := run("db", "query", sql)), (sql, r.output)
            assert other.execute("SELECT 1").fetchone() == (1,)  # still connected
        assert db.execute("SELECT lo_get(%s)", (oid,)).fetchone()[0] == b"kept"
    finally:
        db.execute("SELECT lo_unlink(%s)", (oid,))


def test_copy_to_program_runs_nothing(run):
    # A directory the server's own user may write in: were the command run, the file would be there.
    where = tempfile.mkdtemp(prefix="wa-outbox-copy-")
    os.chmod(where, 0o777)
    marker = os.path.join(where, "ran")
    for sql in ("COPY (SELECT 1) TO PROGRAM 'true'", f"COPY (SELECT 1) TO PROGRAM 'touch {marker}'",
                f"COPY wa_outbox.rate_limits TO '{marker}'"):
        assert refused(r := run("db", "query", sql)), (sql, r.output)
    assert not os.path.exists(marker)
    os.rmdir(where)


def test_the_readme_support_queries_and_harmless_reads_still_work(run, db, message):
    make_dead(db, message)
    for sql in [
        "SELECT id, status, attempts, wamid, last_error->>'message', created_at FROM wa_outbox.notifications "
        "WHERE recipient = '5511987654321' ORDER BY created_at DESC LIMIT 20",
        f"SELECT event, attempt, detail, created_at FROM wa_outbox.notification_timeline "
        f"WHERE notification_id = {message}",
        "SELECT * FROM wa_outbox.notification_timeline WHERE correlation_id = 'req-abc' ORDER BY created_at",
        "SELECT last_error->>'code' AS code, count(*) FROM wa_outbox.notifications WHERE status = 'dead' GROUP BY 1",
        "SELECT * FROM wa_outbox.queue_health", "SELECT id, state, heartbeat_at, info FROM wa_outbox.workers",
        "SELECT * FROM wa_outbox.rate_limits", "TABLE wa_outbox.rate_limits", "VALUES (1, 'a'), (2, 'b')",
        "SHOW statement_timeout", "EXPLAIN SELECT * FROM wa_outbox.notifications WHERE id = 1",
        "EXPLAIN (ANALYZE false, COSTS off) SELECT 1",
        "SELECT pg_size_pretty(pg_total_relation_size('wa_outbox.notifications')), now(), random(), "
        "clock_timestamp(), gen_random_uuid()",
        "SELECT pid, state, wait_event, pg_blocking_pids(pid) FROM pg_stat_activity",
        "WITH dead AS (SELECT * FROM wa_outbox.notifications WHERE status = 'dead') SELECT count(*) FROM dead",
    ]:
        r = run("db", "query", sql)
        assert r.exit_code == 0, (sql, r.output)
    dead = run("db", "query", "--json", "SELECT last_error->>'code' AS code, count(*) AS n FROM "
               "wa_outbox.notifications WHERE status = 'dead' GROUP BY 1")
    assert dead.stdout.strip() == '{"code": "131026", "n": 1}'


def test_it_runs_read_only_with_a_statement_and_a_lock_timeout(run, db, server_url, database_url):
    shown = run("db", "query", "SELECT current_setting('transaction_read_only') AS ro, "
                "current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt")
    assert shown.stdout.splitlines() == ["ro\tst\tlt", "on\t30s\t2s"]
    shown = run("db", "query", "--statement-timeout", "5", "--lock-timeout", "0.5",
                "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')")
    assert shown.stdout.splitlines()[1] == "5s\t500ms"
    slow = run("db", "query", "--statement-timeout", "0.2", "SELECT count(*) FROM generate_series(1, 10000000000)")
    assert slow.exit_code != 0 and slow.output.strip() == "wa-outbox: cancelled after --statement-timeout (0.2 s)"
    with psycopg.connect(database_url) as holder:
        holder.execute("LOCK TABLE wa_outbox.rate_limits IN ACCESS EXCLUSIVE MODE")
        waited = run("db", "query", "--lock-timeout", "0.1", "SELECT * FROM wa_outbox.rate_limits")
        holder.rollback()
    assert waited.exit_code != 0 and "--lock-timeout (0.1 s)" in waited.output
    bad = run("db", "query", "--write", "--as-role", "nobody", "SELECT 1")
    assert bad.exit_code == 2 and "--as-role" in bad.output
    missing = run("db", "query", "--as-role", "no_such_role_at_all", "SELECT 1")
    assert missing.exit_code == 1 and missing.output.strip() == \
        'wa-outbox: database error: role "no_such_role_at_all" does not exist'


# --- the support role --------------------------------------------------------------------------------------------

@pytest.fixture
def support_role(db):
    name = f"wa_support_{uuid.uuid4().hex[:8]}"
    yield name
    if db.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
        db.execute(f'DROP OWNED BY "{name}"')
        db.execute(f'DROP ROLE "{name}"')


def test_the_support_role_reads_the_views_only(run, db, message, support_role, database_url):
    made = run("db", "support-role", support_role)
    assert made.exit_code == 0, made.output
    assert "wa_outbox.notification_timeline" in made.output and "wa_outbox.queue_health" in made.output
    again = run("db", "support-role", support_role)  # safe to repeat
    assert again.exit_code == 0 and "updated" in again.output
    as_role = ("db", "query", "--as-role", support_role)
    timeline = run(*as_role, f"SELECT event FROM wa_outbox.notification_timeline WHERE notification_id = {message}")
    assert timeline.exit_code == 0 and timeline.stdout.splitlines() == ["event", "queued"]
    assert run(*as_role, "SELECT count(*) FROM wa_outbox.queue_health").exit_code == 0
    for table in ("notifications", "notification_events", "webhook_events", "webhook_bodies", "settings"):
        r = run(*as_role, f"SELECT count(*) FROM wa_outbox.{table}")
        assert r.exit_code != 0 and "permission denied" in r.output, (table, r.output)
    assert refused(run(*as_role, "SELECT lo_from_bytea(0, 'data')"))
    # Even past the console's checks (the same transaction, as that role), Postgres refuses the rest itself.
    objects = large_objects(db)
    oid = db.execute("SELECT lo_from_bytea(0, 'kept')").fetchone()[0]
    with psycopg.connect(database_url, autocommit=True) as other:
        pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        try:
            for sql in ["SELECT count(*) FROM wa_outbox.notifications", "COPY (SELECT 1) TO PROGRAM 'true'",
                        "SELECT pg_reload_conf()", f"SELECT pg_terminate_backend({pid})", f"SELECT lo_unlink({oid})",
                        "LOCK TABLE wa_outbox.notifications IN ACCESS EXCLUSIVE MODE",
                        "SELECT nextval(pg_get_serial_sequence('wa_outbox.notifications', 'id'))"]:
                with psycopg.connect(database_url) as conn:
                    conn.execute("SELECT set_config('role', %s, true)", (support_role,))
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        conn.execute(sql)
            assert other.execute("SELECT 1").fetchone() == (1,)
        finally:
            db.execute("SELECT lo_unlink(%s)", (oid,))
    assert large_objects(db) == objects


def test_a_support_role_with_a_password_logs_in_read_only(run, db, support_role, database_url):
    made = run("db", "support-role", support_role, "--password-stdin", input="s3cret-Pass\n")
    assert made.exit_code == 0 and "LOGIN" in made.output and "s3cret-Pass" not in made.output
    stored = db.execute("SELECT rolcanlogin, rolpassword FROM pg_authid WHERE rolname = %s",
                        (support_role,)).fetchone()
    assert stored[0] and stored[1].startswith("SCRAM-SHA-256$") and "s3cret-Pass" not in stored[1]
    # The test database's URL with the support role's credentials (keywords override the URL's; a TCP or a socket
    # URL alike: the embedded Postgres is reached through a socket).
    with psycopg.connect(database_url, user=support_role, password="s3cret-Pass") as conn:
        assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
        assert conn.execute("SHOW statement_timeout").fetchone() == ("30s",)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM wa_outbox.notifications")


def test_a_privileged_or_own_role_is_never_made_a_support_role(run, db):
    me = db.execute("SELECT current_user").fetchone()[0]
    r = run("db", "support-role", me)
    assert r.exit_code == 1 and "not made a support role" in r.output and len(r.output.splitlines()) == 1
    assert db.execute("SELECT rolsuper, rolcanlogin FROM pg_roles WHERE rolname = %s", (me,)).fetchone() == (True, True)
    empty = run("db", "support-role", "x", "--password-stdin", input="\n")
    assert empty.exit_code == 2 and "no password" in empty.output
    assert db.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'x'").fetchone()[0] == 0
