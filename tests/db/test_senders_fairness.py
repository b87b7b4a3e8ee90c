"""Many senders (issue 19): a sender whose backlog is older and longer than everyone else's does not hold the others
back. The claim walks the senders with queued rows round the circle, each its share of the batch up to its free send
slots, and each claim goes on where the last stopped (claim_notifications.sql, worker/_sender.py next_walk_start):
every sender with due messages is claimed within a bounded number of claims while the big one still has work.
Claims counted, not time."""

from __future__ import annotations

import math

import pytest

from tests.live import worker_settings
from wa_outbox import db as wdb, queries
from wa_outbox.worker._sender import Sender, next_walk_start
from wa_outbox.worker._transport import DryRunTransport

SENDERS = 50
BIG = "100000000005025"  # in the middle of the key order: the walk starts neither at it nor right after it
BIG_ROWS = 2000
BATCH = 16
MESSAGE = '{"type": "text", "text": {"body": "x"}}'


@pytest.fixture
def engine(database_url):
    engine = wdb.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def senders() -> list[str]:
    return [str(100_000_000_005_000 + i) for i in range(SENDERS)]


def fill(db, engine, big_mps: float) -> None:
    """The big sender's BIG_ROWS messages, queued an hour before the others' 1 to 3 each; every sender paced
    (`ratelimit set`), the big one at big_mps, the others at 50/s."""
    for s in senders():
        queries.ratelimit_set(engine, phone_number_id=s, mps=big_mps if s == BIG else 50.0, burst=None, resume=False)
    db.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, "
               "next_attempt_at) SELECT %s, (5511900000000 + i)::text, %s::jsonb, '', "
               "now() - interval '1 hour' + make_interval(secs => i * 1e-3) FROM generate_series(1, %s) i",
               (BIG, MESSAGE, BIG_ROWS))
    others = [s for s in senders() if s != BIG]
    db.execute("INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash) "
               "SELECT s.sender, (5521900000000 + s.k * 10 + i)::text, %s::jsonb, '' "
               "FROM unnest(%s::text[]) WITH ORDINALITY AS s(sender, k), generate_series(1, 1 + s.k::integer %% 3) i",
               (MESSAGE, others))
    db.execute("ANALYZE wa_outbox.notifications")


def claims_until_every_sender_claimed(engine, settings) -> tuple[int, set[str]]:
    """A worker's claims of BATCH (its own path: slots reserved ahead, the walk's start carried over) until every
    sender has had a row claimed: (claims, senders claimed)."""
    paced = worker_settings(settings, "http://127.0.0.1:9", worker_concurrency=BATCH)
    me = Sender(engine, DryRunTransport(), paced, "worker-fair", paced.retry_policy())
    claimed: set[str] = set()
    claims = 0
    try:
        while claimed != set(senders()) and claims < 10 * SENDERS:
            claimed |= {row.phone_number_id for row in me._claim(BATCH)}
            claims += 1
    finally:
        me.drain(0)
    return claims, claimed


def queued(db, sender: str) -> int:
    return db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE phone_number_id = %s AND status = 'queued'",
                      (sender,)).fetchone()[0]


@pytest.mark.parametrize("big_mps", [1_000_000.0, 80.0])
def test_every_sender_is_claimed_within_a_lap_while_the_big_one_has_work(db, engine, settings, big_mps):
    fill(db, engine, big_mps)
    claims, claimed = claims_until_every_sender_claimed(engine, settings)
    # Each claim serves BATCH senders (a share of one row each at this batch size): a lap of SENDERS senders takes
    # ceil(SENDERS / BATCH) claims; one more for the walk's start. The age order alone would have spent
    # BIG_ROWS / BATCH = 125 claims on the big sender first.
    assert claimed == set(senders())
    assert claims <= math.ceil(SENDERS / BATCH) + 1, claims
    assert queued(db, BIG) > BIG_ROWS // 2  # the big one still had work all along


def test_the_walk_goes_on_where_the_last_claim_stopped():
    assert next_walk_start("", []) == ""
    assert next_walk_start("", ["3", "1", "2"]) == "3"
    # past the last sender, round to the first ones: the last in the walk's order is the largest of those
    assert next_walk_start("5", ["7", "9", "1", "2"]) == "2"
    assert next_walk_start("5", ["5"]) == "5"  # round the whole circle back to itself
    assert next_walk_start("5", []) == "5"


def test_a_claim_says_whether_its_walk_left_senders_unvisited(db, engine, settings):
    """A claim short of its limit with senders still unvisited (`more`: rows over a grant, rows another worker
    holds) is no sign that the queue is drained: the worker claims again at once instead of waiting for the earliest
    due row's sender (worker/_sender.py produce). One that went round the whole circle says so too."""
    fill(db, engine, 80.0)
    paced = worker_settings(settings, "http://127.0.0.1:9", worker_concurrency=BATCH)
    me = Sender(engine, DryRunTransport(), paced, "worker-more", paced.retry_policy())
    try:
        first = me._claim(BATCH)  # BATCH senders' shares fill the batch: the walk stops with the rest unvisited
        assert first and all(row.more for row in first)
        rest = me._claim(10 * SENDERS * 3)  # room for every share: the walk goes round the whole circle
        assert rest and not any(row.more for row in rest)
    finally:
        me.drain(0)
