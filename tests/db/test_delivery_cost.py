"""The deliveries claim and record statements stay O(batch) however many deliveries the table holds and however long
an endpoint's backlog: the record probes each delivery by primary key (never a scan of the table), and the claim
reads an endpoint's due deliveries in index order, as many as it takes (never the whole backlog sorted)."""

from __future__ import annotations

import json

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


def nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def test_recording_probes_each_delivery_by_key(db):
    endpoint_id = fill(db)
    claimed = db.execute("UPDATE wa_outbox.deliveries SET status = 'delivering', attempts = 1, locked_by = 'w', "
                         "locked_until = now() + interval '1 minute' WHERE id IN (SELECT id FROM wa_outbox.deliveries "
                         "WHERE status = 'queued' ORDER BY id LIMIT %s) RETURNING id", (BATCH,)).fetchall()
    outcomes = [{"id": i, "endpoint_id": endpoint_id, "attempt": 1, "status": "delivered", "next_in": None,
                 "status_code": 200, "latency_ms": 1.5, "response_head": "{}", "error": None} for (i,) in claimed]
    root = plan(db, "record_deliveries", {"worker_id": "w", "outcomes": json.dumps(outcomes)})
    scans = [(n["Node Type"], n.get("Index Name")) for n in nodes(root) if n.get("Relation Name") == "deliveries"]
    assert ("Seq Scan", None) not in scans, scans
    assert ("Index Scan", "deliveries_pkey") in scans or ("Index Only Scan", "deliveries_pkey") in scans, scans


def test_the_claim_reads_as_many_due_deliveries_as_it_takes(db):
    fill(db)
    root = plan(db, "claim_deliveries", {"worker_id": "w", "lease_seconds": 60, "limit": BATCH,
                                         "per_endpoint": BATCH, "held": "{}"}, analyze=True)
    due = [n for n in nodes(root) if n.get("Index Name") == "deliveries_due"]
    assert due, root
    assert all(n["Actual Rows"] <= BATCH for n in due), [n["Actual Rows"] for n in due]
