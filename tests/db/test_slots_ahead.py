"""Send slots reserved ahead of the claim (reserve_slots_ahead.sql): a worker reserves its senders' slots in a short
transaction of its own, so its claim takes no lock on their rate_limits rows and the claims of several workers for
one sender do not wait for each other's commit; slots it reserved and did not use come back only while they are
still the end of the sender's schedule; every row claimed still has a slot of its own, spaced as the rate says."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import psycopg
import pytest

from tests.live import SENDER, worker_settings
from wa_outbox import db as wdb
from wa_outbox.config import Settings
from wa_outbox.enqueue import enqueue_many
from wa_outbox.queries import SlotGrant
from wa_outbox.worker._sender import SLOT_HORIZON, Sender, claim_pacing, next_reservations
from wa_outbox.worker._transport import DryRunTransport

TEXT = {"type": "text", "text": {"body": "pedido confirmado"}}
AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def grant(sender: str, granted: int) -> SlotGrant:
    return SlotGrant(phone_number_id=sender, granted=granted, slots_from=AT, level=1.0, refill=10.0, paused=False)


# --- pure ----------------------------------------------------------------------------------------------------------

def test_next_reservations_only_after_a_full_claim_and_give_back_the_unused_tail():
    # A claim that filled its threads (a drain): reserve ahead next time, for the senders claimed for.
    assert next_reservations([], ["b", "a", "a"], 3) == (["a", "b"], {})
    # Granted 5, claimed 2: three slots back; granted 3, claimed 3: none.
    assert next_reservations([grant("a", 5), grant("b", 3)], ["a", "b", "a", "b", "b"], 5) == (
        ["a", "b"], {"a": (3, AT)})
    # A claim that found fewer rows than threads (the rate or the queue limits it): the next reserves inside itself,
    # exactly as many as it has rows; this one's unused slots go back.
    assert next_reservations([grant("a", 4)], ["a"], 64) == ([], {"a": (3, AT)})
    assert next_reservations([grant("a", 0)], [], 64) == ([], {})


# --- in Postgres ---------------------------------------------------------------------------------------------------

@pytest.fixture
def engine(database_url):
    engine = wdb.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def reserve_ahead(engine, wanted: int, unused: int = 0, reserved_at=None, horizon: float = SLOT_HORIZON) -> dict:
    return wdb.fetch(engine, "reserve_slots_ahead", {
        "senders": [SENDER], "wanted": [wanted], "unused": [unused], "reserved_at": [reserved_at],
        "default_mps": 20.0, "lead": 0.0, "horizon": horizon})[0]


def slot_times(g: dict) -> list[float]:
    start = g["slots_from"].timestamp()
    return [start + max(0.0, k - g["level"]) / g["refill"] for k in range(1, g["granted"] + 1)]


def claim(database_url: str, limit: int, reserved: list[dict], mps: float = 20.0) -> list[dict]:
    """One claim on a connection of its own that gives up on any lock wait longer than 2 s (instead of waiting
    for good), as `worker-a`."""
    with psycopg.connect(database_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        conn.execute("SET lock_timeout = '2s'")
        return conn.execute(wdb.query("claim_notifications"), {
            "limit": limit, "worker_id": "worker-a", "lease_seconds": 60, "default_mps": mps,
            **claim_pacing(Settings()), "reserved": json.dumps(reserved, default=str)}).fetchall()


def test_a_claim_with_slots_reserved_ahead_takes_no_lock_on_the_senders_schedule(database_url, db, engine, sender,
                                                                                  run):
    assert run("ratelimit", "set", SENDER, "--mps", "20").exit_code == 0
    enqueue_many(db, [{"to": f"+55119{i:08d}", "message": TEXT} for i in range(8)])
    g = reserve_ahead(engine, 8)
    assert g["granted"] == 8  # one slot now, then one per 1/19.7 s for half a second
    # Another transaction holds the sender's rate_limits row (another worker's claim, as before this change).
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM wa_outbox.rate_limits WHERE phone_number_id = %s FOR UPDATE", (SENDER,))
        rows = claim(database_url, 4, [g])  # does not wait for it
        # A claim reserving slots itself passes the sender over (another claim is reserving its slots): no wait
        # either, and nothing claimed (before many senders, it waited for the lock).
        assert claim(database_url, 4, []) == []
        holder.rollback()
    # The rows took the first reserved slots, in order.
    assert sorted(r["send_at"] for r in rows) == pytest.approx(slot_times(g)[:4], abs=1e-5)
    assert db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'sending'").fetchone()[0] == 4


def test_unused_slots_come_back_only_while_they_end_the_schedule(db, engine, run):
    # 2/s, a 10 s horizon: slots about half a second apart, all still ahead while the test runs.
    assert run("ratelimit", "set", SENDER, "--mps", "2").exit_code == 0
    first = reserve_ahead(engine, 6, horizon=10)
    assert first["granted"] == 6
    # Two used, four back: the next reservation goes on right after the second slot.
    second = reserve_ahead(engine, 1, unused=4, reserved_at=first["slots_from"], horizon=10)
    assert slot_times(second)[0] == pytest.approx(slot_times(first)[1] + 1 / 1.97, abs=1e-3)
    # A reservation that gets nothing (another worker's, its schedule full) leaves the schedule as it was: a refund
    # of the last grant still comes back after it.
    third = reserve_ahead(engine, 1, horizon=10)
    assert reserve_ahead(engine, 3, horizon=0)["granted"] == 0
    fourth = reserve_ahead(engine, 0, unused=1, reserved_at=third["slots_from"], horizon=0)
    assert fourth["granted"] == 0
    fifth = reserve_ahead(engine, 1, horizon=10)
    assert slot_times(fifth)[0] == pytest.approx(slot_times(third)[0], abs=1e-3)
    # The same refund again (a repeated statement), after someone reserved since: nothing comes back, the next
    # slot follows the last one reserved.
    sixth = reserve_ahead(engine, 1, unused=1, reserved_at=third["slots_from"], horizon=10)
    assert slot_times(sixth)[0] == pytest.approx(slot_times(fifth)[0] + 1 / 1.97, abs=1e-3)


def test_a_workers_claims_reserve_ahead_after_the_first_and_every_claimed_row_has_its_own_slot(
        db, engine, settings, sender, run, monkeypatch):
    # 2/s, a 10 s horizon: slots about half a second apart, all still ahead while the test runs.
    monkeypatch.setattr("wa_outbox.worker._sender.SLOT_HORIZON", 10.0)
    assert run("ratelimit", "set", SENDER, "--mps", "2").exit_code == 0
    paced = worker_settings(settings, "http://127.0.0.1:9", rate_limit_mps=2.0, worker_concurrency=64)
    me = Sender(engine, DryRunTransport(), paced, "worker-me", paced.retry_policy())
    claims = []
    for batch, limit in ((4, 4), (3, 3), (2, 5)):
        enqueue_many(db, [{"to": f"+5511{9 * len(claims) + i:09d}", "message": TEXT} for i in range(batch)])
        rows = me._claim(limit)
        claims.append(sorted(r.send_at for r in rows))
        assert len(rows) == batch
        # Full claims: the next reserves ahead; the last found fewer rows than its limit: the next reserves inside.
        assert me._reserve_for == ([SENDER] if batch == limit else [])
        # The third reserved 5 ahead, used 2, and gave the other 3 back at once.
        assert me._unused == {}
    times = sorted(t for c in claims for t in c)
    # Slots never shared and never closer than the schedule's spacing (1/1.97 s), across claims, each claim's going
    # on right after the last one's.
    assert min(b - a for a, b in zip(times, times[1:], strict=False)) >= 1 / 1.97 - 1e-3
    assert claims[2][0] == pytest.approx(claims[1][-1] + 1 / 1.97, abs=1e-3)
    # The third's 3 unused slots came back: the schedule goes on right after its last one used.
    assert slot_times(reserve_ahead(engine, 1, horizon=10))[0] == pytest.approx(claims[2][-1] + 1 / 1.97, abs=1e-3)
    me.drain(0)
