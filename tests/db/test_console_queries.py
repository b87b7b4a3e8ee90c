"""The SQL console's typed queries (wa_outbox/queries/: console_begin, console_volatile_calls, support_role_state)
run on the connection the console holds, inside its transaction: what console_begin sets lasts for that transaction
only, and the rows come back as their dataclasses."""

from __future__ import annotations

import uuid

import psycopg
from psycopg import sql

from wa_outbox import queries


def test_console_begin_sets_the_timeouts_and_role_for_the_transaction_only(database_url, db):
    role = f"console_reader_{uuid.uuid4().hex[:12]}"  # roles are the cluster's: one of this run's own
    db.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
    try:
        with psycopg.connect(database_url) as conn:
            conn.read_only = True
            before = conn.execute("SELECT current_setting('statement_timeout'), current_user").fetchone()
            conn.rollback()
            queries.console_begin(conn, statement_timeout="1500ms", lock_timeout="250ms",
                                  role=role)
            inside = conn.execute("SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), "
                                  "current_user, current_setting('transaction_read_only')").fetchone()
            assert inside == ("1500ms", "250ms", role, "on")
            conn.rollback()
            after = conn.execute("SELECT current_setting('statement_timeout'), current_user").fetchone()
            assert after == before and after[1] != role
            conn.rollback()
            queries.console_begin(conn, statement_timeout="2000ms", lock_timeout="100ms", role=None)
            assert conn.execute("SELECT current_user").fetchone() == before[1:]  # no role: the connection's own
            conn.rollback()
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_console_volatile_calls_names_the_volatile_ones_by_kind_schema_and_name(database_url):
    with psycopg.connect(database_url) as conn:
        conn.read_only = True
        found = queries.console_volatile_calls(
            conn, function_schemas=["", "pg_catalog", ""], function_names=["lower", "pg_terminate_backend", "random"],
            operator_schemas=[""], operator_names=["+"])
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # in the caller's transaction
        conn.rollback()
    assert sorted(found, key=lambda v: v.name) == [
        queries.VolatileCall("function", "pg_catalog", "pg_terminate_backend"),
        queries.VolatileCall("function", "pg_catalog", "random")]


def test_support_role_state(database_url):
    with psycopg.connect(database_url) as conn:
        me = queries.support_role_state(conn, name=conn.info.user)
        nobody = queries.support_role_state(conn, name="no_such_role_here")
    assert me.exists and me.is_me and me.i_am_member
    assert (nobody.exists, nobody.privileged, nobody.is_me, nobody.i_am_member) == (False, False, False, None)
    assert {"notification_timeline", "queue_health"} <= set(nobody.views)
    assert not {"notifications", "notification_events"} & set(nobody.views)  # views only, never tables
