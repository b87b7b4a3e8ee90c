"""The deliveries claim and record statements stay O(batch) however many deliveries the table holds and however long
an endpoint's backlog: the record probes each delivery by primary key (never a scan of the table, nor of every
lease), and the claim reads an endpoint's due deliveries in index order, as many as it takes (never the whole
backlog sorted); the dispatch counts an endpoint's due deliveries from its index, up to the backlog it allows.
Both as psycopg first runs them (a plan for the values) and as it runs them from the sixth time on (prepared: one
plan for any values, made from the statistics of that moment, which may be old)."""

from __future__ import annotations

import json

import pytest
from psycopg import sql

from tests.endpoint_rows import add_endpoint
from wa_outbox import db as wdb

FINISHED = 10_000  # as an EXISTS, a hash join over a scan of deliveries looked cheaper here than 16 probes
BACKLOG = 2_000    # due deliveries of one endpoint, all dispatched at the same moment (one next_attempt_at)
BATCH = 16


def fill(db) -> str:
    endpoint_id, _ = add_endpoint(db, "https://receiver.example/hooks")
    db.execute("INSERT INTO wa_outbox.events (type, data) SELECT 'message.received', '{}' "
               "FROM generate_series(1, %s)", (FINISHED + BACKLOG,))
    db.execute("INSERT INTO wa_outbox.deliveries (endpoint_id, event_seq, status, attempts, delivered_at) "
               "SELECT %s, seq, 'delivered', 1, now() FROM wa_outbox.events ORDER BY seq LIMIT %s",
               (endpoint_id, FINISHED))
    db.execute("INSERT INTO wa_outbox.deliveries (endpoint_id, event_seq, next_attempt_at) "
               "SELECT %s, seq, now() - interval '1 second' FROM wa_outbox.events ORDER BY seq OFFSET %s",
               (endpoint_id, FINISHED))
    db.execute("ANALYZE wa_outbox.deliveries")
    return endpoint_id


def plan(db, name: str, params: dict, *, analyze: bool = False) -> dict:
    explain = "EXPLAIN (ANALYZE, FORMAT JSON) " if analyze else "EXPLAIN (FORMAT JSON) "
    with db.transaction(force_rollback=True):
        return db.cursor().execute(explain + wdb.query(name), params).fetchone()[0][0]["Plan"]


def generic_plan(db, name: str, params: dict) -> dict:
    """The plan Postgres keeps for a prepared statement: one for any values (psycopg prepares after five runs)."""
    query = wdb.named_query(name)
    with db.transaction(force_rollback=True):
        cursor = db.cursor()
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(b"PREPARE cost_probe AS " + query.text)
        try:
            values = sql.SQL(", ").join(sql.Literal(params[n]) for n in query.names)
            explain = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE cost_probe({})").format(values)
            return cursor.execute(explain).fetchone()[0][0]["Plan"]
        finally:
            cursor.execute("DEALLOCATE cost_probe")


def lease(db, worker: str, n: int) -> list[int]:
    """The first `n` queued deliveries, claimed by `worker` (their first attempt)."""
    return [i for (i,) in db.execute(
        "UPDATE wa_outbox.deliveries SET status = 'delivering', attempts = 1, locked_by = %s, "
        "locked_until = now() + interval '1 minute' WHERE id IN (SELECT id FROM wa_outbox.deliveries "
        "WHERE status = 'queued' ORDER BY id LIMIT %s) RETURNING id", (worker, n)).fetchall()]


def delivered(endpoint_id: str, ids: list[int]) -> str:
    """record_deliveries' outcomes: each of `ids` delivered at its first attempt."""
    return json.dumps([{"id": i, "endpoint_id": endpoint_id, "attempt": 1, "status": "delivered", "next_in": None,
                        "status_code": 200, "latency_ms": 1.5, "response_head": "{}", "error": None} for i in ids])


def deliveries_scans(root: dict) -> list[tuple[str, str | None]]:
    """How the plan reads wa_outbox.deliveries: (node type, index name) of each scan of it."""
    return [(n["Node Type"], n.get("Index Name")) for n in nodes(root) if n.get("Relation Name") == "deliveries"]


def nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def test_recording_probes_each_delivery_by_key(db):
    endpoint_id = fill(db)
    outcomes = delivered(endpoint_id, lease(db, "w", BATCH))
    root = plan(db, "record_deliveries", {"worker_id": "w", "outcomes": outcomes})
    scans = deliveries_scans(root)
    assert ("Seq Scan", None) not in scans, scans
    assert ("Index Scan", "deliveries_pkey") in scans or ("Index Only Scan", "deliveries_pkey") in scans, scans


def test_the_claim_reads_as_many_due_deliveries_as_it_takes(db):
    fill(db)
    root = plan(db, "claim_deliveries", {"worker_id": "w", "lease_seconds": 60, "limit": BATCH,
                                         "per_endpoint": BATCH, "held": "{}"}, analyze=True)
    due = [n for n in nodes(root) if n.get("Index Name") == "deliveries_due"]
    assert due, root
    assert all(n["Actual Rows"] <= BATCH for n in due), [n["Actual Rows"] for n in due]


@pytest.mark.parametrize("planned", [plan, generic_plan], ids=["for-the-values", "prepared"])
def test_recording_reads_neither_the_table_nor_every_lease(db, planned):
    """Statistics taken before any delivery was in flight (the analyzer takes new ones only once a table has
    doubled), then 1,000 leases of other workers: the record still probes its own deliveries by key."""
    endpoint_id = fill(db)
    lease(db, "other", 1000)
    outcomes = delivered(endpoint_id, lease(db, "w", BATCH))
    root = planned(db, "record_deliveries", {"worker_id": "w", "outcomes": outcomes})
    scans = deliveries_scans(root)
    assert all(index != "deliveries_leased" and kind != "Seq Scan" for kind, index in scans), scans


@pytest.mark.parametrize("planned", [plan, generic_plan], ids=["for-the-values", "prepared"])
def test_the_dispatch_counts_the_due_backlog_from_its_index(db, planned):
    """Statistics taken while 10,000 deliveries were done and the backlog had just been written: a LIMIT without an
    order made the planner expect due rows spread through the table and read it from the start."""
    fill(db)
    db.execute("INSERT INTO wa_outbox.events (type, data) SELECT 'message.received', '{}' FROM generate_series(1, 10)")
    root = planned(db, "dispatch_events", {"batch": 1000, "backlog": 250, "by": "w"})
    scans = deliveries_scans(root)
    assert ("Seq Scan", None) not in scans, scans
