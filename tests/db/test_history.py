"""The hot paths and the ops queries stay bounded as finished history grows (bench/history.py measures the speed;
these tests check the plans, which is what breaks first)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


def test_queue_health_counts_each_live_state_from_its_index_not_the_whole_history(db):
    """The view (and the /metrics scrape through queue_metrics.sql) agrees with a GROUP BY over the table, and reads
    no table from end to end: with 100,000 finished messages, a sequential scan is what the old view did."""
    fill_history(db, 100_000, 50)
    db.execute("UPDATE wa_outbox.notifications SET blocked = true WHERE id IN (SELECT id FROM wa_outbox.notifications "
               "WHERE status = 'queued' ORDER BY id LIMIT 5)")
    db.execute("UPDATE wa_outbox.notifications SET status = 'sending', locked_by = 'w', locked_until = now() + "
               "interval '1 minute' WHERE id IN (SELECT id FROM wa_outbox.notifications WHERE status = 'queued' "
               "AND NOT blocked ORDER BY id LIMIT 4)")
    db.execute("UPDATE wa_outbox.notifications SET status = 'unknown', unknown_since = now() WHERE id IN (SELECT id "
               "FROM wa_outbox.notifications WHERE status = 'queued' AND NOT blocked ORDER BY id LIMIT 3)")
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead' WHERE id <= 20")
    db.execute("UPDATE wa_outbox.notifications SET status = 'failed' WHERE id BETWEEN 21 AND 30")
    db.execute("INSERT INTO wa_outbox.webhook_events (dedup_key, field, kind, payload, status) "
               "SELECT 'd:' || i, 'messages', 'change', '{}', (ARRAY['queued', 'dead', 'done'])[1 + mod(i, 3)] "
               "FROM generate_series(1, 30) i")
    db.execute("ANALYZE wa_outbox.notifications")
    db.execute("ANALYZE wa_outbox.webhook_events")
    truth = {("notifications", s): n for s, n in db.execute(
        "SELECT status, count(*) FROM wa_outbox.notifications WHERE status IN ('queued', 'sending', 'unknown', "
        "'dead') GROUP BY status")}
    truth.update({("webhook_events", s): n for s, n in db.execute(
        "SELECT status, count(*) FROM wa_outbox.webhook_events WHERE status IN ('queued', 'processing', 'dead') "
        "GROUP BY status")})
    assert truth[("notifications", "queued")] == 50 - 4 - 3 and truth[("notifications", "dead")] == 20
    view = {(q, s): n for q, s, n in db.execute("SELECT queue, status, rows FROM wa_outbox.queue_health")}
    assert view == truth  # empty states have no row, as before
    due = db.execute("SELECT oldest_due FROM wa_outbox.queue_health WHERE queue = 'notifications' AND "
                     "status = 'queued'").fetchone()[0]
    assert due == db.execute("SELECT min(next_attempt_at) FROM wa_outbox.notifications WHERE status = 'queued'"
                             ).fetchone()[0]
    metrics = {(r[0], r[1]): r[2] for r in db.execute(wdb.query("queue_metrics"))}
    assert metrics[("notifications", "failed")] == 10 and metrics[("notifications", "dead")] == 20
    for sql in ("SELECT * FROM wa_outbox.queue_health", wdb.query("queue_metrics"), wdb.query("ops_queue_depth")):
        plan = explain(db, sql, {"cap": 10_000} if "%(cap)s" in sql else {})
        scans = [n for n in nodes(plan["Plan"]) if n["Node Type"] == "Seq Scan"
                 and n.get("Relation Name") == "notifications"]
        assert not scans, (sql, [n.get("Filter") for n in scans])


def test_the_ops_page_counts_a_backlog_up_to_a_cap_and_says_so(db, database_url):
    from wa_outbox import ops
    fill_history(db, 0, 5)
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead' WHERE id <= 2")
    engine = wdb.create_engine(database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    try:
        exact = {r.status: r for r in ops.queue_depth(engine) if r.queue == "notifications"}
        capped = {r.status: r for r in ops.queue_depth(engine, cap=2) if r.queue == "notifications"}
    finally:
        engine.dispose()
    assert (exact["queued"].rows, exact["queued"].capped) == (3, False)
    assert (exact["dead"].rows, exact["dead"].capped) == (2, False)
    assert (capped["queued"].rows, capped["queued"].capped) == (2, True)
    assert (capped["dead"].rows, capped["dead"].capped) == (2, False)  # exactly at the cap is not more
    assert capped["sending"].rows == 0 and capped["sending"].oldest_age_seconds is None
    assert exact["queued"].oldest_age_seconds >= 0


def test_the_queue_and_the_dead_letters_are_counted_from_indexes_alone(db):
    """/metrics (queue_metrics.sql through queue_health) counts and ages the queue, and the ops page groups the dead
    letters by code, from the index alone once VACUUM has marked the pages all-visible: no heap row read per queued
    or dead message (at 10 million messages, 100,000 of each cost 0.2-0.6 s). And the figures stay exact."""
    fill_history(db, 20_000, 3_000)
    db.execute("UPDATE wa_outbox.notifications SET blocked = true WHERE id IN (SELECT id FROM wa_outbox.notifications "
               "WHERE status = 'queued' ORDER BY id LIMIT 5)")
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead', last_error = CASE WHEN id % 3 = 0 THEN NULL "
               "ELSE jsonb_build_object('code', 131000 + id % 3, 'message', 'x') END WHERE id <= 600")
    db.execute("VACUUM ANALYZE wa_outbox.notifications")
    plans = {name: explain(db, wdb.query(name), params) for name, params in (
        ("queue_metrics", {}), ("ops_dead_groups", {"groups": 50, "samples": 5}))}
    plans["queue_health"] = explain(db, "SELECT * FROM wa_outbox.queue_health", {})
    for name, index in (("queue_metrics", "notifications_queued_age"), ("queue_health", "notifications_queued_age"),
                        ("ops_dead_groups", "notifications_dead_code")):
        scans = [n for n in nodes(plans[name]["Plan"]) if n.get("Relation Name") == "notifications"]
        assert [n for n in scans if n["Node Type"] == "Index Only Scan" and n["Index Name"] == index], (name, scans)
        assert all(n["Heap Fetches"] == 0 for n in scans if n["Node Type"] == "Index Only Scan"), (name, scans)
        # what still reads the heap reads a few rows: ops_dead_groups' samples (5 a group, 3 groups), the 5 blocked
        heap = [(n["Node Type"], n.get("Index Name"), n["Actual Rows"] * n["Actual Loops"])
                for n in scans if n["Node Type"] != "Index Only Scan"]
        assert all(read <= 15 for _, _, read in heap), (name, heap)

    metrics = {(r[0], r[1]): (r[2], float(r[3])) for r in db.execute(wdb.query("queue_metrics"))}
    rows, age = metrics[("notifications", "queued")]
    oldest_age = db.execute("SELECT extract(epoch FROM now() - min(created_at)) FROM wa_outbox.notifications "
                            "WHERE status = 'queued'").fetchone()[0]
    assert rows == 3_000 and abs(age - float(oldest_age)) < 5
    groups = {r[0]: (r[1], r[2]) for r in db.execute(wdb.query("ops_dead_groups"), {"groups": 50, "samples": 5})}
    truth = {r[0]: (r[1], r[2]) for r in db.execute(
        "SELECT coalesce(last_error ->> 'code', ''), count(*), max(id) FROM wa_outbox.notifications "
        "WHERE status = 'dead' GROUP BY 1")}
    assert groups == truth and set(truth) == {"", "131001", "131002"}


# --- history flatness: where a claim's writes land (schema.sql: notifications and contacts fillfactor) ----------------

@pytest.fixture
def at_version_4(server_url):
    """A scratch database at version 4 (the revision before 0005_speed), to be filled there and upgraded by the test."""
    from tests.conftest import _with_dbname, create_scratch_database, drop_database
    from wa_outbox import migrate
    name = create_scratch_database(server_url, prefix="wa_outbox_history")
    url = _with_dbname(server_url, name)
    migrate.upgrade(url, "0004_scale")
    yield url
    drop_database(server_url, name)


def page(ctid: str) -> int:
    return int(ctid.strip("()").split(",")[0])


def test_new_messages_stay_out_of_the_holes_left_on_history_pages(at_version_4):
    """Pages of history written before the upgrade are full but for a few hundred bytes each, which the free space
    map offers to every INSERT: new messages would land one per cold page (bench/history.py at 10 M). After the
    upgrade they go to pages of their own, which keep room for their claim's and record's new row versions."""
    from wa_outbox import migrate
    with psycopg.connect(at_version_4, autocommit=True) as conn:
        # rows of ~1.3 kB: six per page, a ~340-byte hole in each, which a small new message would fit
        conn.execute(
            "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status, wamid) "
            "SELECT %s, (5511900000000 + i)::text, jsonb_build_object('type', 'text', 'text', "
            "jsonb_build_object('body', repeat('x', 1250))), '', 'read', 'wamid.h' || i "
            "FROM generate_series(1, 600) i", (SENDER,))
        migrate.upgrade(at_version_4)
        conn.execute("VACUUM wa_outbox.notifications")  # the holes are now in the free space map
        history = {page(r[0]) for r in conn.execute("SELECT ctid::text FROM wa_outbox.notifications")}
        conn.execute("INSERT INTO wa_outbox.settings (key, value) VALUES ('default_phone_number_id', %s)", (SENDER,))
        for i in range(50):
            conn.execute("SELECT wa_outbox.enqueue(%s, '{\"type\":\"text\",\"text\":{\"body\":\"hi\"}}')",
                         (str(5511800000000 + i),))
        new = {page(r[0]) for r in conn.execute(
            "SELECT ctid::text FROM wa_outbox.notifications WHERE status = 'queued'")}
    assert len(history) >= 90
    assert not new & (history - {max(history)}), f"new messages landed on {len(new & history)} history pages"


def test_pacing_a_contact_rewrites_its_row_in_place(at_version_4, monkeypatch):
    """Each claim moves its recipients' contacts.pair_paced_until. Contacts written before the upgrade fill their
    pages; after it, each page has room, so that update stays on the row's page (HOT: no new contacts_pkey entry, no
    second page), however many contacts there are."""
    from wa_outbox import migrate
    with psycopg.connect(at_version_4, autocommit=True) as conn:
        conn.execute("INSERT INTO wa_outbox.contacts (phone_number_id, wa_id, profile_name) "
                     "SELECT %s, (5511900000000 + i)::text, 'Customer ' || i FROM generate_series(1, 2000) i",
                     (SENDER,))
        migrate.upgrade(at_version_4)
        conn.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash) "
                     "SELECT %s, (5511900000000 + i * 13)::text, '{\"type\":\"text\",\"text\":{\"body\":\"hi\"}}', '' "
                     "FROM generate_series(1, 100) i", (SENDER,))
        before = dict(conn.execute("SELECT wa_id, ctid::text FROM wa_outbox.contacts").fetchall())
        engine = wdb.create_engine(at_version_4, pool_size=1, isolation_level="AUTOCOMMIT")
        try:
            params = {"limit": 100, "worker_id": "w", "lease_seconds": 60, "default_mps": 1e6,
                      **claim_pacing(Settings())}
            claimed = wdb.fetch(engine, "claim_notifications", params)
        finally:
            engine.dispose()
        after = dict(conn.execute("SELECT wa_id, ctid::text FROM wa_outbox.contacts WHERE pair_paced_until IS NOT NULL"
                                  ).fetchall())
    assert len(claimed) == 100 and len(after) == 100
    moved = [w for w, ctid in after.items() if page(ctid) != page(before[w])]
    assert not moved, f"{len(moved)} of 100 paced contacts moved to another page"
