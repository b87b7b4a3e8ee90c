"""The hot paths and the ops queries stay bounded as finished history grows (bench/history.py measures the speed;
these tests check the plans, which is what breaks first)."""

from __future__ import annotations

from typing import Any, Iterator

import psycopg
import pytest

from wa_outbox import db as wdb
from wa_outbox.config import Settings
from wa_outbox.worker._sender import claim_pacing

SENDER = "100000000000001"


def fill_history(conn: psycopg.Connection, finished: int, queued: int) -> None:
    """`finished` read messages beside `queued` due ones (due times in random order, as retries leave them)."""
    conn.execute(
        "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status, wamid, "
        "next_attempt_at) SELECT %s, (5511900000000 + i)::text, '{\"type\":\"text\",\"text\":{\"body\":\"hi\"}}', "
        "'', 'read', 'wamid.h' || i, now() - interval '1 day' FROM generate_series(1, %s) i", (SENDER, finished))
    conn.execute(
        "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, next_attempt_at) "
        "SELECT %s, (5511800000000 + i)::text, '{\"type\":\"text\",\"text\":{\"body\":\"hi\"}}', '', "
        "now() - random() * interval '1 hour' FROM generate_series(1, %s) i", (SENDER, queued))
    conn.execute("ANALYZE wa_outbox.notifications")


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def explain(conn: psycopg.Connection, sql: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, FORMAT JSON), in a transaction rolled back."""
    with conn.transaction(force_rollback=True):
        return conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()[0][0]


def test_the_claim_reads_one_batch_of_a_long_queue_beside_a_long_history(db, database_url):
    """Beside 100,000 finished messages, the planner stops walking notifications_due for the claim and sorts all
    5,000 due rows instead, unless each priority's range has its own LIMIT."""
    fill_history(db, 100_000, 5_000)
    params = {"limit": 64, "worker_id": "w", "lease_seconds": 60, "default_mps": 1e6, **claim_pacing(Settings())}
    plan = explain(db, wdb.query("claim_notifications"), params)
    candidates = next(p for p in plan["Plan"]["Plans"] if p.get("Subplan Name") == "CTE candidates")
    read = max(n["Actual Rows"] * n["Actual Loops"] for n in nodes(candidates))
    assert read <= 64, f"the claim read {read} rows to claim 64"
    assert not [n for n in nodes(candidates) if n["Node Type"] == "Sort"]
    engine = wdb.create_engine(database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    claimed = wdb.fetch(engine, "claim_notifications", params)
    engine.dispose()
    assert len(claimed) == 64  # and it still claims, the oldest due first
    oldest = db.execute("SELECT array_agg(id ORDER BY next_attempt_at) FROM (SELECT id, next_attempt_at FROM "
                        "wa_outbox.notifications WHERE status = 'sending' OR (status = 'queued' AND next_attempt_at "
                        "<= (SELECT max(next_attempt_at) FROM wa_outbox.notifications WHERE status = 'sending'))) s"
                        ).fetchone()[0]
    assert sorted(oldest) == sorted(r["id"] for r in claimed)
