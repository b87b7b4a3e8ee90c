"""The worker's analyzer (worker/_analyzer.py) gives the queue tables statistics where autovacuum has not: once they
hold rows, and again once they have outgrown the statistics they have. Without it, a statement prepared while the
deliveries table was nearly empty kept a plan that scans the table for every outcome it records."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

from tests.conftest import _with_dbname, create_scratch_database, drop_database
from tests.endpoint_rows import add_endpoint
from wa_outbox import db as wdb, migrate
from wa_outbox.worker._analyzer import MIN_CHANGES, analyze_if_needed

ROWS = 5 * MIN_CHANGES
QUEUE_TABLES = ("notifications", "webhook_events", "events", "deliveries", "delivery_attempts")


@pytest.fixture
def scratch(server_url: str):
    """A database of its own: the statistics counters of the shared one carry every other test's rows."""
    name = create_scratch_database(server_url, prefix="wa_outbox_analyzer")
    url = _with_dbname(server_url, name)
    migrate.upgrade(url)
    engine = wdb.create_engine(url, pool_size=1, isolation_level="AUTOCOMMIT")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            # where autovacuum runs (the embedded Postgres), it must not analyze these tables behind the test's back
            for table in QUEUE_TABLES:
                conn.execute(f"ALTER TABLE wa_outbox.{table} SET (autovacuum_enabled = false)")
            yield conn, engine
    finally:
        engine.dispose()
        drop_database(server_url, name)


def flush_counters(conn: psycopg.Connection) -> None:
    """Make this session's row counts visible in pg_stat_user_tables now (they are otherwise sent within a second)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")  # the flush happens at the end of a transaction


def deliveries_scans(conn: psycopg.Connection, outcomes: str) -> list[tuple[str, str | None]]:
    explain = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE record({}, 'w')").format(sql.Literal(outcomes))
    plan = conn.execute(explain).fetchone()[0][0]["Plan"]
    found, todo = [], [plan]
    while todo:
        node = todo.pop()
        todo.extend(node.get("Plans", []))
        if node.get("Relation Name") == "deliveries":
            found.append((node["Node Type"], node.get("Index Name")))
    return found


def test_a_table_analyzed_nearly_empty_is_analyzed_again_once_it_has_outgrown_its_statistics(scratch):
    conn, engine = scratch
    endpoint_id, _ = add_endpoint(conn, "https://receiver.example/hooks")
    conn.execute("ANALYZE wa_outbox.deliveries")  # as at a deployment's first start: statistics of an empty table
    # A statement prepared now, and planned once for any parameters (as Postgres does after a few executions)
    record = wdb.named_query("record_deliveries")
    assert record.names == ("outcomes", "worker_id")
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute(b"PREPARE record(text, text) AS " + record.text)
    outcomes = json.dumps([{"id": 1, "endpoint_id": endpoint_id, "attempt": 1, "status": "delivered",
                            "next_in": None, "status_code": 200, "latency_ms": 1.0, "response_head": "{}",
                            "error": None}])
    deliveries_scans(conn, outcomes)  # the generic plan is made now, for an empty table

    conn.execute("INSERT INTO wa_outbox.events (type, data) SELECT 'message.received', '{}' "
                 "FROM generate_series(1, %s)", (ROWS,))
    conn.execute("INSERT INTO wa_outbox.deliveries (endpoint_id, event_seq, status, attempts, delivered_at) "
                 "SELECT %s, seq, 'delivered', 1, now() FROM wa_outbox.events", (endpoint_id,))
    flush_counters(conn)
    stale = deliveries_scans(conn, outcomes)

    analyzed = analyze_if_needed(engine)
    assert {"deliveries", "events"} <= set(analyzed)
    fresh = deliveries_scans(conn, outcomes)
    # the prepared statement was planned again, for the table as it is: each outcome found by its key
    assert ("Seq Scan", None) not in fresh, (stale, fresh)
    assert {("Index Scan", "deliveries_pkey"), ("Index Only Scan", "deliveries_pkey")} & set(fresh), fresh
    # analyzed as it is now: not again until it has changed by as many rows as it holds
    assert analyze_if_needed(engine) == []
    conn.execute("UPDATE wa_outbox.deliveries SET updated_at = now() WHERE id <= %s", (ROWS // 2,))
    flush_counters(conn)
    assert "deliveries" not in analyze_if_needed(engine)


def test_a_table_never_analyzed_is_analyzed_once_it_holds_rows(scratch):
    conn, engine = scratch
    assert analyze_if_needed(engine) == []  # empty tables are left alone
    conn.execute("INSERT INTO wa_outbox.events (type, data) VALUES ('message.received', '{}')")
    flush_counters(conn)
    assert analyze_if_needed(engine) == ["events"]
    last = conn.execute("SELECT last_analyze FROM pg_stat_user_tables "
                        "WHERE schemaname = 'wa_outbox' AND relname = 'events'").fetchone()[0]
    assert last is not None
    assert analyze_if_needed(engine) == []
