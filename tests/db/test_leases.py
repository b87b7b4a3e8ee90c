"""Lease guards: a late finisher and the rescuer never both win; claims honour the shared token bucket."""

from __future__ import annotations

import json

import pytest

from wa_outbox import db as wdb
from wa_outbox.config import Settings
from wa_outbox.enqueue import enqueue
from wa_outbox.worker._sender import claim_pacing

TEXT = {"type": "text", "text": {"body": "x"}}


@pytest.fixture
def auto(database_url):
    engine = wdb.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def claim(engine, worker: str, limit: int = 10, lease: float = 60, mps: float = 1000, **settings) -> list[dict]:
    return wdb.fetch(engine, "claim_notifications", {"limit": limit, "worker_id": worker, "lease_seconds": lease,
                                                     "default_mps": mps, **claim_pacing(Settings(**settings))})


def record(engine, worker: str, nid: int, status: str = "sent") -> list[tuple]:
    """The (id, status) pairs recorded."""
    outcome = {"id": nid, "status": status, "event": status, "wamid": "wamid.late", "error": None, "delay": None,
               "refund": False, "detail": {}}
    rows = wdb.fetch(engine, "record_outcomes", {"worker_id": worker, "outcomes": json.dumps([outcome])})
    return [(r["id"], r["status"]) for r in rows]


def rescue(engine) -> int:
    return wdb.fetch(engine, "rescue_expired_leases", {"worker_id": "rescuer", "limit": 100})[0]["rescued"]


def test_rescuer_first_then_the_late_finisher_changes_nothing(auto, db, sender):
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    assert [r["id"] for r in claim(auto, "A", lease=0.01)] == [nid]
    db.execute("SELECT pg_sleep(0.05)")
    assert rescue(auto) == 1
    assert record(auto, "A", nid) == []  # A finished late: its UPDATE matches nothing
    assert db.execute("SELECT status, wamid FROM wa_outbox.notifications").fetchone() == ("unknown", None)


def test_finisher_first_then_the_rescuer_changes_nothing(auto, db, sender):
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    claim(auto, "A", lease=0.01)
    db.execute("SELECT pg_sleep(0.05)")
    assert record(auto, "A", nid) == [(nid, "sent")]
    assert rescue(auto) == 0
    assert db.execute("SELECT status, wamid FROM wa_outbox.notifications").fetchone() == ("sent", "wamid.late")


def test_another_workers_lease_is_not_recorded_over(auto, db, sender):
    nid = enqueue(db, to="+5511987654321", message=TEXT)
    claim(auto, "A")
    assert record(auto, "B", nid) == []
    assert claim(auto, "B") == []  # and B cannot claim it either
    assert db.execute("SELECT status, locked_by FROM wa_outbox.notifications").fetchone() == ("sending", "A")


def test_claim_reserves_only_the_slots_within_its_horizon_and_paces_the_rest(auto, db, sender):
    for i in range(20):
        enqueue(db, to=f"+55119{i:08d}", message=TEXT)
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, burst, tokens) "
               "VALUES ('100000000000001', 10, 5, 5)")
    # The 5 tokens in the bucket at once, then one slot per 0.1 s up to the horizon (0.5 s after the first).
    slots = sorted(r["send_at"] for r in claim(auto, "A", limit=20))
    assert len(slots) == 10
    assert slots[4] - slots[0] < 0.01
    assert all(abs(b - a - 0.1) < 0.001 for a, b in zip(slots[4:], slots[5:], strict=False))
    # The lease counts from the slot.
    assert db.execute("SELECT min(extract(epoch FROM locked_until)) FROM wa_outbox.notifications "
                      "WHERE status = 'sending'").fetchone()[0] >= slots[0] + 59
    waits = [r[0] for r in db.execute(
        "SELECT extract(epoch FROM next_attempt_at - now()) FROM wa_outbox.notifications WHERE status = 'queued' "
        "ORDER BY next_attempt_at")]
    assert len(waits) == 10
    # Each comes back when its slot would be within the horizon: spread at 10/s, not all at once.
    assert 0 <= waits[0] <= 0.3 and 0.8 <= waits[-1] <= 1.2
    assert db.execute("SELECT sum(attempts) FROM wa_outbox.notifications WHERE status = 'queued'"
                      ).fetchone()[0] == 0  # deferral burns no attempt


def test_a_paused_sender_gets_no_tokens(auto, db, sender):
    enqueue(db, to="+5511987654321", message=TEXT)
    wdb.execute(auto, "pause_sender", {"phone_number_id": "100000000000001", "seconds": 30, "reason": "190: token",
                                       "default_mps": 80})
    assert claim(auto, "A") == []
    wait = db.execute("SELECT extract(epoch FROM next_attempt_at - now()) FROM wa_outbox.notifications"
                      ).fetchone()[0]
    assert 28 <= wait <= 31


def test_a_pair_limited_recipient_waits_while_others_go(auto, db, sender):
    limited = enqueue(db, to="+5511987654321", message=TEXT)
    other = enqueue(db, to="+5511987654322", message=TEXT)
    wdb.execute(auto, "pause_recipient", {"phone_number_id": "100000000000001", "wa_id": "5511987654321"})
    assert [r["id"] for r in claim(auto, "A")] == [other]
    assert db.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s", (limited,)).fetchone() == (
        "queued",)
    # a second strike waits 4^2 s
    wdb.execute(auto, "pause_recipient", {"phone_number_id": "100000000000001", "wa_id": "5511987654321"})
    wait = db.execute("SELECT extract(epoch FROM pair_paused_until - now()) FROM wa_outbox.contacts "
                      "WHERE wa_id = '5511987654321'").fetchone()[0]
    assert 15 <= wait <= 16.5


def test_claim_is_served_by_the_partial_index(auto, db, sender):
    """A due-range read of one priority (next_claim_in's, resume_sender's) walks notifications_due in order, beside
    a finished history it never reads. Filled and analyzed: on an empty table every plan costs the same and the
    planner's pick is arbitrary (it once took notifications_sender_due and a sort)."""
    db.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status, "
               "priority) SELECT '100000000000001', (5511900000000 + i)::text, '{\"type\": \"text\"}', '', "
               "CASE WHEN i % 20 = 0 THEN 'queued' ELSE 'read' END, i % 2 FROM generate_series(1, 10000) i")
    db.execute("ANALYZE wa_outbox.notifications")
    plan = "\n".join(r[0] for r in db.execute(
        "EXPLAIN SELECT id FROM wa_outbox.notifications WHERE status = 'queued' AND NOT blocked AND priority = 1 "
        "AND next_attempt_at <= now() ORDER BY next_attempt_at LIMIT 10 FOR UPDATE SKIP LOCKED"))
    assert "notifications_due" in plan, plan
    assert "Seq Scan" not in plan and "Sort" not in plan, plan
