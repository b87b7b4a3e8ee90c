"""Throughput per sender number: the shared schedule of send slots never puts more than the configured rate in any
one-second window, across worker processes, and still reaches it; a throttling answer (130429) pauses every worker
and the rows already scheduled are given back; 131057 pauses the number for about a minute without spending the
attempt; `ratelimit resume` lifts a pause at once; a stopping worker gives back what it had not sent yet."""

from __future__ import annotations

import bisect
import threading
import time

import psycopg
import pytest

from tests.live import SENDER, producing, running_worker, wait_for, worker_settings
from tests.unit.test_late_send_limit import MARGINS
from wa_outbox.enqueue import enqueue_many
from wa_outbox.worker._classify import Action, SendResult, classify

TEXT = {"type": "text", "text": {"body": "pedido confirmado"}}


def window_max(times: list[float], width: float = 1.0) -> int:
    """The most events in any window (t - width, t]: the simulator's (and Meta's) sliding second."""
    times = sorted(times)
    return max((i + 1 - bisect.bisect_right(times, t - width, 0, i + 1) for i, t in enumerate(times)), default=0)


def queue(db, n: int, prefix: str = "+55119") -> list[int]:
    return enqueue_many(db, [{"to": f"{prefix}{i:08d}", "message": TEXT} for i in range(n)])


def grant_times(db) -> list[float]:
    """When each send was granted: its claim's `sending` timeline event (the claim takes the tokens)."""
    return [r[0] for r in db.execute("SELECT extract(epoch FROM created_at)::float8 FROM wa_outbox.notification_events "
                                     "WHERE event = 'sending' ORDER BY created_at").fetchall()]


def count(db, where: str) -> int:
    return db.execute(f"SELECT count(*) FROM wa_outbox.notifications WHERE {where}").fetchone()[0]


# --- pure ----------------------------------------------------------------------------------------------------------

def test_131057_pauses_the_sender_for_about_a_minute_without_spending_the_attempt():
    error = {"error": {"code": 131057, "message": "(#131057) Account in maintenance mode"}}
    d = classify(SendResult(http_status=400, body=error))
    assert (d.action, d.wait_seconds) == (Action.THROTTLE_SENDER, 60.0)
    assert classify(SendResult(http_status=400, body=error, retry_after=90)).wait_seconds == 90


def test_the_clock_offset_estimate_keeps_its_value_while_a_sample_allows_it():
    from wa_outbox.worker._sender import clock_offset
    # The database read its clock between sent and received: the shortest round trip bounds the offset.
    slow, fast = (100.0, 100.05, 100.2), (200.0, 200.004, 200.01)
    assert clock_offset([slow, fast]) == 0.0  # on one machine: 0 lies within [-0.006, 0.004]
    assert clock_offset([fast], previous=0.003) == 0.003
    assert abs(clock_offset([(300.0, 302.0, 300.01)]) - 1.99) < 1e-9  # 2 s ahead: the nearest bound


# --- the schedule in Postgres ----------------------------------------------------------------------------------------

def reserve(conn, wanted: int, horizon: float = 0.5, default_mps: float = 80, lead: float = 0.0) -> list[float]:
    """Reserve up to `wanted` send slots for SENDER; their times (seconds since the epoch), in slot order."""
    granted, start, level, refill = conn.execute(
        "SELECT granted, extract(epoch FROM slots_from)::float8, level, refill "
        "FROM wa_outbox.reserve_slots(%s, %s, %s, %s, %s)", (SENDER, wanted, default_mps, lead, horizon)).fetchone()
    return [start + max(0.0, k - level) / refill for k in range(1, granted + 1)]


def test_default_schedule_spaces_slots_just_over_one_interval_and_reserves_only_within_the_horizon(run, db):
    assert run("ratelimit", "set", SENDER, "--mps", "20").exit_code == 0
    shape = db.execute("SELECT s.refill, s.capacity, r.burst FROM wa_outbox.rate_limits r, "
                       "LATERAL wa_outbox.bucket_shape(r.mps, r.burst) s").fetchone()
    assert shape == (20 * 0.985, 1, None)
    slots = reserve(db, 50, horizon=0.5)
    # One slot now, then one per 1/19.7 s up to half a second ahead: no burst.
    assert len(slots) == 1 + int(0.5 * 19.7)
    gaps = [b - a for a, b in zip(slots, slots[1:], strict=False)]
    assert all(abs(g - 1 / 19.7) < 1e-6 for g in gaps)
    # Any 21 consecutive slots span more than a second, with 15 ms to spare for the send's jitter.
    assert 20 / 19.7 > 1.015
    # The next claim goes on from the end of this schedule, not from now.
    more = reserve(db, 3, horizon=1.0)
    assert more and abs(more[0] - slots[-1] - 1 / 19.7) < 1e-3
    # A claim with nothing left within its horizon gets nothing.
    assert reserve(db, 5, horizon=0.0) == []
    # What the ops page and `ratelimit show` count: no token is left now, slots are reserved ahead.
    assert db.execute("SELECT tokens < 0 FROM wa_outbox.rate_limits").fetchone() == (True,)
    assert "\t0.00\t" in run("ratelimit", "show").output
    assert run("ratelimit", "set", SENDER, "--mps", "20", "--burst", "20").exit_code == 0  # the classic bucket
    assert "\t20\t20\t20\t20\t" in run("ratelimit", "show").output


def test_an_idle_senders_first_slot_is_the_lead_ahead_so_the_claims_own_latency_never_makes_it_late(run, db):
    assert run("ratelimit", "set", SENDER, "--mps", "20").exit_code == 0
    db.execute("UPDATE wa_outbox.rate_limits SET refilled_at = now() - interval '10 seconds'")
    # Bounded by the database's clock read just before and just after the call: no allowance for a busy machine.
    before = db.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
    slots_from = db.execute("SELECT extract(epoch FROM slots_from)::float8 "
                            "FROM wa_outbox.reserve_slots(%s, 3, 80, 0.05, 0.5)", (SENDER,)).fetchone()[0]
    after = db.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
    assert before + 0.05 <= slots_from <= after + 0.05
    ahead = ("SELECT extract(epoch FROM slots_from - clock_timestamp())::float8 "
             "FROM wa_outbox.reserve_slots(%s, 3, 80, 0.05, 0.5)")
    # At most one interval: at a rate the workers cannot reach, a claim's rows go at once.
    assert run("ratelimit", "set", SENDER, "--mps", "1000000").exit_code == 0
    assert db.execute(ahead, (SENDER,)).fetchone()[0] <= 1 / 985_000


def test_burst_mode_is_the_classic_bucket_in_slots(run, db):
    """--burst B: B slots at once when the bucket is full, then one per 1/mps."""
    assert run("ratelimit", "set", SENDER, "--mps", "10", "--burst", "5").exit_code == 0
    db.execute("UPDATE wa_outbox.rate_limits SET refilled_at = now() - interval '10 seconds'")  # idle: full
    slots = reserve(db, 8, horizon=0.25)
    assert len(slots) == 7  # 5 now, then 2 more within 0.25 s at 10/s
    assert max(slots[:5]) - min(slots[:5]) < 0.01
    assert abs(slots[5] - slots[4] - 0.1) < 1e-3 and abs(slots[6] - slots[5] - 0.1) < 1e-3


def test_a_reservation_for_rows_the_caller_holds_reads_them_as_locked_and_creates_nothing(run, db, database_url):
    """reserve_slots_set(…, held => true), as the claim calls it for the senders its walk locked: the same slots a
    reservation that locks them itself would grant, from the schedule as the last holder left it; a sender with no
    bucket gets none made (the caller said it holds every row: nothing to reserve from)."""
    assert run("ratelimit", "set", SENDER, "--mps", "20").exit_code == 0
    # A schedule reserved 2.5 s ahead: the held call below continues it however late a busy machine makes it
    first = reserve(db, 50, horizon=5.0)
    call = ("SELECT phone_number_id, granted, extract(epoch FROM slots_from)::float8, level, refill "
            "FROM wa_outbox.reserve_slots_set(%s, %s, 80, 0, 5.0, held => true)")
    with psycopg.connect(database_url) as conn:  # one transaction: the caller's lock, then the reservation
        conn.execute("SELECT 1 FROM wa_outbox.rate_limits WHERE phone_number_id = %s FOR UPDATE", (SENDER,))
        rows = conn.execute(call, ([SENDER, "100000000000999"], [3, 3])).fetchall()
    assert [r[:2] for r in rows] == [(SENDER, 3)]  # the unknown sender: no row, no bucket
    sender, granted, start, level, refill = rows[0]
    slots = [start + max(0.0, k - level) / refill for k in range(1, granted + 1)]
    assert abs(slots[0] - first[-1] - 1 / 19.7) < 1e-3  # on from the schedule as the first reservation left it
    assert db.execute("SELECT count(*) FROM wa_outbox.rate_limits").fetchone()[0] == 1


def test_a_paused_sender_reserves_nothing_and_its_schedule_survives_the_pause(db, run):
    assert run("ratelimit", "set", SENDER, "--mps", "20").exit_code == 0
    ahead = reserve(db, 10, horizon=0.5)
    from wa_outbox import db as wdb
    db.execute("UPDATE wa_outbox.rate_limits SET paused_until = now() + interval '3 seconds'")
    granted, paused = db.execute("SELECT granted, paused FROM wa_outbox.reserve_slots(%s, 5, 80, 0, 0.5)",
                                 (SENDER,)).fetchone()
    assert (granted, paused) == (0, True)
    assert wdb.safe_to_repeat("pause_sender")
    # Lifted at once (`ratelimit resume`): the slots reserved before the pause stay taken.
    assert run("ratelimit", "resume", SENDER).exit_code == 0
    after = reserve(db, 1, horizon=1.0)
    assert after[0] >= ahead[-1] + 1 / 19.7 - 1e-3


def test_concurrent_claimers_never_get_more_than_the_rate_in_any_second_and_reach_it(database_url, db, run):
    """The schedule alone, exactly: 4 connections reserve slots as fast as they can for 3 s."""
    rate, seconds = 20, 3.0
    assert run("ratelimit", "set", SENDER, "--mps", str(rate)).exit_code == 0
    slots: list[float] = []

    def claimer() -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                slots.extend(reserve(conn, 3, horizon=0.5))

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slots.sort()
    assert len(set(slots)) == len(slots)  # no slot handed out twice
    assert window_max(slots) <= rate
    gaps = [b - a for a, b in zip(slots, slots[1:], strict=False)]
    assert min(gaps) > 1 / rate  # every pair of slots further apart than 1/mps
    # Reserved ahead, the schedule has no holes: the rate is reached exactly (0.985 of it, by design).
    assert (len(slots) - 1) / (slots[-1] - slots[0]) >= 0.98 * rate


def test_a_130429_pauses_every_worker(db, sender, sim, settings, run):
    assert run("ratelimit", "set", SENDER, "--mps", "50").exit_code == 0
    sim.set_faults([{"mode": "error", "code": 130429, "count": 1, "retry_after": 3}])
    ids = queue(db, 40)
    s = worker_settings(settings, sim.base_url)
    with running_worker(s), running_worker(s):
        wait_for(lambda: count(db, "status = 'sent'") + count(db, "status IN ('delivered', 'read')") == len(ids),
                 timeout=60, what="all sent")
    throttled_at, requested_at, paused_until = db.execute(
        "SELECT extract(epoch FROM e.created_at)::float8, (e.detail->>'request_at')::float8, "
        "       extract(epoch FROM r.paused_until)::float8 "
        "FROM wa_outbox.notification_events e, wa_outbox.rate_limits r WHERE e.event = 'throttled'").fetchone()
    # the sender was paused 3 s (Retry-After) from the refused request (its outcome may be recorded later on a busy
    # machine: the pause is not counted from that)
    assert 2 < paused_until - requested_at < 30
    # No worker claimed anything for that sender from the moment the throttled answer was recorded until the pause
    # ended.
    assert [t for t in grant_times(db) if throttled_at < t < paused_until] == []
    # The throttled message did not spend an attempt.
    assert db.execute("SELECT max(attempts) FROM wa_outbox.notifications").fetchone()[0] == 1


def released(db, reason_prefix: str) -> list[tuple[int, int]]:
    """(id, attempt) of the `released` timeline events whose reason starts so."""
    return db.execute("SELECT notification_id, attempt FROM wa_outbox.notification_events WHERE event = 'released' "
                      "AND detail->>'reason' LIKE %s ORDER BY id", (reason_prefix + "%",)).fetchall()


def test_the_worker_throttled_gives_back_the_rows_waiting_for_their_slots_without_spending_attempts(
        db, sender, sim, settings, run):
    """At 20/s a claim reserves about half a second of slots; the first send draws a 130429: the rest of that
    schedule is not sent into the pause but given back, queued, attempt not counted."""
    assert run("ratelimit", "set", SENDER, "--mps", "20").exit_code == 0
    sim.set_faults([{"mode": "error", "code": 130429, "count": 1, "retry_after": 2}])
    ids = queue(db, 12)
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: len(sim.messages()) == len(ids), timeout=30, what="all sent after the pause")
    given_back = released(db, "its sender was throttled")
    assert given_back and all(attempt == 0 for _, attempt in given_back)
    throttled_at, paused_until = db.execute(
        "SELECT extract(epoch FROM e.created_at)::float8, extract(epoch FROM r.paused_until)::float8 "
        "FROM wa_outbox.notification_events e, wa_outbox.rate_limits r WHERE e.event = 'throttled'").fetchone()
    # Nothing reached the simulator from the throttled answer until the pause's end.
    assert [m for m in sim.messages() if throttled_at < m["received_at"] < paused_until] == []
    assert db.execute("SELECT max(attempts) FROM wa_outbox.notifications").fetchone()[0] == 1


def test_a_stopping_worker_gives_back_the_rows_waiting_for_their_slots(db, sender, sim, settings, run):
    """At 4/s a claim reserves a slot now and more up to half a second ahead; stopping right after the first send
    leaves those unsent: they go back to queued at once, attempt not counted, nothing left `sending`. The rows the
    claim found beyond its slots wait, queued, for the sender's next slots (a second or two at 4/s), never longer."""
    assert run("ratelimit", "set", SENDER, "--mps", "4").exit_code == 0
    ids = queue(db, 6)
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: len(sim.messages()) >= 1, timeout=30, interval=0.01, what="the first send")
    sent = {int(m["biz_opaque_callback_data"]) for m in sim.messages()}
    assert len(sent) < len(ids)
    given_back = released(db, "the worker stopped")
    assert given_back and all(attempt == 0 for _, attempt in given_back)
    rows = db.execute("SELECT id, status, attempts, next_attempt_at <= now() + interval '5 seconds' "
                      "FROM wa_outbox.notifications ORDER BY id").fetchall()
    assert {r[0] for r in rows if r[1] == "sent"} == sent
    assert all(r[1:] == ("queued", 0, True) for r in rows if r[0] not in sent), rows
    due_now = {message_id for message_id, _ in given_back}
    assert due_now and db.execute("SELECT bool_and(next_attempt_at <= now()) FROM wa_outbox.notifications "
                                  "WHERE id = ANY(%s)", (list(due_now),)).fetchone()[0]  # given back: due at once


def test_131057_pauses_the_number_and_resume_lifts_it_at_once_with_the_deferred_messages(
        db, sender, sim, settings, run):
    sim.set_faults([{"mode": "error", "code": 131057, "count": 1}])
    ids = queue(db, 10)
    with running_worker(worker_settings(settings, sim.base_url, worker_concurrency=1)):
        wait_for(lambda: db.execute("SELECT paused_until > now() + interval '50 seconds' FROM wa_outbox.rate_limits "
                                    "WHERE phone_number_id = %s", (SENDER,)).fetchone() == (True,),
                 what="the sender paused about a minute")
        shown = run("ratelimit", "show").output
        assert "131057" in shown
        # the refused message waits for the pause: its outcome (recorded in the worker's next batch, just after the
        # pause itself) is its `throttled` event, written with its new next_attempt_at. (Waiting for any message
        # deferred past the pause was not enough: the claims defer the others first, and on a busy machine the
        # refused one's outcome could land after the resume below, a minute out.)
        wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'throttled'"
                                    ).fetchone()[0] >= 1, what="the refused message deferred past the pause")
        assert count(db, "status = 'queued' AND next_attempt_at > now() + interval '50 seconds'") >= 1
        sent_before = len(sim.messages())

        resumed = run("ratelimit", "resume", SENDER)
        assert resumed.exit_code == 0 and "resumed" in resumed.output, resumed.output
        # Every message goes now, not in a minute: the deferred ones were brought back.
        wait_for(lambda: len(sim.messages()) == len(ids), timeout=30, what="all sent after resume")
    assert sent_before < len(ids)
    assert db.execute("SELECT paused_until FROM wa_outbox.rate_limits").fetchone()[0] is None
    # The maintenance answer did not spend an attempt: every message was sent at its first counted attempt.
    assert db.execute("SELECT max(attempts) FROM wa_outbox.notifications").fetchone()[0] == 1
    assert run("ratelimit", "resume", SENDER).output.startswith(f"{SENDER}: not paused")
    assert run("ratelimit", "resume", "abc").exit_code != 0


def test_resume_moves_only_what_the_pause_deferred(db, sender, settings):
    from wa_outbox import queries
    from wa_outbox.db import create_engine
    engine = create_engine(settings.database_url, pool_size=1, isolation_level="AUTOCOMMIT")
    try:
        ids = queue(db, 3)
        db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, tokens, paused_until, pause_reason) "
                   "VALUES (%s, 20, 0, now() + interval '5 minutes', 'test')", (SENDER,))
        db.execute("UPDATE wa_outbox.notifications SET next_attempt_at = CASE id "
                   "WHEN %s THEN now() + interval '5 minutes' WHEN %s THEN now() + interval '5 minutes 2 seconds' "
                   "ELSE now() + interval '24 hours' END", (ids[0], ids[1]))
        r = queries.resume_sender(engine, phone_number_id=SENDER)
        assert r.moved == 2 and r.pause_reason == "test"
        due = [row[0] for row in db.execute("SELECT id FROM wa_outbox.notifications WHERE next_attempt_at <= now() "
                                            "ORDER BY id").fetchall()]
        assert due == ids[:2]  # the one waiting a day on a retry delay of its own keeps it
        assert queries.resume_sender(engine, phone_number_id="999").moved == 0  # no bucket yet: nothing to do
    finally:
        engine.dispose()


def test_set_with_resume_also_brings_back_the_deferred_messages(db, sender, run):
    [nid] = queue(db, 1)
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, tokens, paused_until, pause_reason) "
               "VALUES (%s, 20, 0, now() + interval '5 minutes', 'test')", (SENDER,))
    db.execute("UPDATE wa_outbox.notifications SET next_attempt_at = now() + interval '5 minutes'")
    assert run("ratelimit", "set", SENDER, "--mps", "30", "--resume").exit_code == 0
    assert count(db, "next_attempt_at <= now()") == 1
    assert db.execute("SELECT mps, paused_until FROM wa_outbox.rate_limits").fetchone() == (30, None)


def sim_times(sim) -> dict[int, list[float]]:
    """Outbox id -> when the simulator accepted each send of it."""
    times: dict[int, list[float]] = {}
    for m in sim.messages():
        times.setdefault(int(m["biz_opaque_callback_data"]), []).append(m["received_at"])
    return times


def test_a_130429_makes_every_worker_give_back_the_slots_it_holds_for_that_sender_at_once(
        db, sender, sim, settings, run, monkeypatch):
    """Two workers each hold rows waiting for their slots; the next send draws a 130429. The worker that got it
    gives back its rows, and so does the other, told by the pause's NOTIFY: nothing reaches Meta from the throttled
    answer until the pause ends, and every message is then sent exactly once, its given-back attempt not counted.
    (A 3 s horizon instead of 0.5 s: each worker holds rows for seconds, so the NOTIFY never races a slot. 30
    messages, 15 s at 2/s: on a loaded machine one worker's claims can pass over the sender the other holds for a
    while, and with 14 one CI run never saw both holding rows at once.)"""
    monkeypatch.setattr("wa_outbox.worker._sender.SLOT_HORIZON", 3.0)
    assert run("ratelimit", "set", SENDER, "--mps", "2").exit_code == 0
    ids = queue(db, 30)
    s = worker_settings(settings, sim.base_url)
    with running_worker(s), running_worker(s):
        # Both hold rows (the second claims once the first one's schedule is half a horizon from its end).
        wait_for(lambda: db.execute("SELECT count(DISTINCT locked_by) FROM wa_outbox.notifications "
                                    "WHERE status = 'sending'").fetchone()[0] == 2, timeout=30, interval=0.01,
                 what="both workers holding rows")
        sim.set_faults([{"mode": "error", "code": 130429, "count": 1, "retry_after": 3}])
        wait_for(lambda: sum(map(len, sim_times(sim).values())) == len(ids), timeout=60, what="all sent")
    throttled_at, paused_until = db.execute(
        "SELECT extract(epoch FROM e.created_at)::float8, extract(epoch FROM r.paused_until)::float8 "
        "FROM wa_outbox.notification_events e, wa_outbox.rate_limits r WHERE e.event = 'throttled'").fetchone()
    # Nothing reached the simulator from the throttled answer until the pause's end: not even what the other
    # worker had reserved (before, it sent those for up to a horizon).
    times = sim_times(sim)
    assert [t for ts in times.values() for t in ts if throttled_at < t < paused_until] == []
    # Given back, none of them counted as an attempt, among them rows of the worker that was not throttled.
    given_back = released(db, "its sender was throttled or paused")
    assert given_back and all(attempt == 0 for _, attempt in given_back)
    claimed_by = ("(SELECT s.detail->>'worker' FROM wa_outbox.notification_events s WHERE s.notification_id = "
                  "e.notification_id AND s.event = 'sending' AND s.id < e.id ORDER BY s.id DESC LIMIT 1)")
    [throttled_worker] = db.execute(f"SELECT {claimed_by} FROM wa_outbox.notification_events e "
                                    "WHERE e.event = 'throttled'").fetchone()
    givers = {r[0] for r in db.execute(f"SELECT {claimed_by} FROM wa_outbox.notification_events e "
                                       "WHERE e.event = 'released'")}
    assert givers - {throttled_worker}, "the worker that was not throttled sent what it held into the pause"
    # Never lost, never sent twice.
    assert sorted(times) == sorted(ids) and all(len(ts) == 1 for ts in times.values())
    assert count(db, "status IN ('sent', 'delivered', 'read')") == len(ids)
    assert db.execute("SELECT max(attempts) FROM wa_outbox.notifications").fetchone()[0] == 1


def test_a_pause_notification_halts_only_its_sender_and_garbage_is_ignored(settings):
    from wa_outbox.worker._sender import Sender
    sender = Sender(engine=None, transport=None, settings=settings, worker_id="w", policy=settings.retry_policy())
    sender.on_notify("")  # an enqueue's wake-up
    sender.on_notify("pause 100000000000001 nonsense")
    sender.on_notify("pause 100000000000001 -1")  # already over
    assert sender._halted == {}
    sender.on_notify("pause 100000000000001 2.5")
    [(at, until)] = sender._halted.values()
    assert list(sender._halted) == ["100000000000001"] and abs(until - at - 2.5) < 1e-9


def test_a_row_given_back_unsent_returns_its_recipients_pair_reservation(db, sender, sim, settings, run):
    """One message per recipient per minute (pair burst 1): a row a stopping worker gives back before its slot no
    longer holds its recipient back a minute, while a row that was sent keeps its reservation."""
    assert run("ratelimit", "set", SENDER, "--mps", "4").exit_code == 0
    ids = queue(db, 6)
    s = worker_settings(settings, sim.base_url, pair_burst=1, pair_rate_seconds=60.0)
    with running_worker(s):
        wait_for(lambda: len(sim.messages()) >= 1, timeout=30, interval=0.01, what="the first send")
    sent = set(sim_times(sim))
    given_back = {i for i, _ in released(db, "the worker stopped")}
    assert given_back and not given_back & sent
    held_back = dict(db.execute(
        "SELECT n.id, c.pair_paced_until > now() + interval '30 seconds' FROM wa_outbox.notifications n "
        "JOIN wa_outbox.contacts c ON c.phone_number_id = n.phone_number_id AND c.wa_id = n.recipient").fetchall())
    assert all(held_back[i] for i in sent)
    assert not any(held_back[i] for i in given_back)
    # So they go with the next worker at once, not in a minute; each recipient still gets one message.
    with running_worker(s):
        wait_for(lambda: len(sim.messages()) == len(ids), timeout=30, what="all sent, none held back a minute")
    assert sorted(sim_times(sim)) == sorted(ids)


def test_pair_reservations_come_back_only_while_no_later_claim_moved_them(db, sender):
    """wa_outbox.return_pair_reservations, case by case: taking back k intervals is exact for rows given back from
    one claim, and refused (the safe side) once anything to that recipient changed after the claim."""
    to = ["+5511900000001", "+5511900000002", "+5511900000003", "+5511900000004"]
    ids = enqueue_many(db, [{"to": t, "message": TEXT} for t in to + [to[1], to[3]]])
    alone, later, other_worker, pair_a, m_later, pair_b = ids
    claimed_at = "now() - interval '1 second'"
    db.execute(f"UPDATE wa_outbox.notifications SET status = 'sending', locked_by = 'w', updated_at = {claimed_at}, "
               "locked_until = now() + interval '30 seconds' "
               "WHERE id = ANY(%s)", ([alone, later, pair_a, pair_b],))
    db.execute("UPDATE wa_outbox.notifications SET status = 'sending', locked_by = 'x', "
               "locked_until = now() + interval '30 seconds' WHERE id = %s",
               (other_worker,))
    db.execute("UPDATE wa_outbox.notifications SET status = 'sending', locked_by = 'x', updated_at = now(), "
               "locked_until = now() + interval '30 seconds' "
               "WHERE id = %s", (m_later,))  # claimed after `later`: that reservation is real
    db.execute("INSERT INTO wa_outbox.contacts (phone_number_id, wa_id, pair_paced_until) "
               "SELECT DISTINCT phone_number_id, recipient, now() + interval '20 seconds' FROM wa_outbox.notifications")

    def paced() -> dict[int, float]:
        return dict(db.execute(
            "SELECT n.id, round(extract(epoch FROM c.pair_paced_until)::numeric, 3)::float8 "
            "FROM wa_outbox.notifications n JOIN wa_outbox.contacts c "
            "ON c.phone_number_id = n.phone_number_id AND c.wa_id = n.recipient").fetchall())

    give_back = "SELECT wa_outbox.return_pair_reservations(%s, 'w', %s)"
    assert db.execute(give_back, ([alone, later, other_worker, pair_a, pair_b], 0.0)).fetchone()[0] == 0
    before = paced()
    assert db.execute(give_back, ([alone, later, other_worker, pair_a, pair_b], 6.0)).fetchone()[0] == 3
    after = paced()
    assert after[alone] == pytest.approx(before[alone] - 6, abs=1e-3)     # alone: exact
    assert after[pair_a] == pytest.approx(before[pair_a] - 12, abs=1e-3)  # two rows of one claim, one recipient
    assert after[later] == before[later]              # another claim came after: kept
    assert after[other_worker] == before[other_worker]  # not this worker's row: kept


@pytest.mark.parametrize(("mps", "burst", "margin"), MARGINS)
def test_the_schedule_is_spaced_by_the_margin_the_worker_allows_late_sends(db, mps, burst, margin):
    """slot_margin (SQL) with the cases tests/unit/test_late_send_limit.py gives the worker's late_send_limit: the
    margin, and a default schedule whose mps + 1 consecutive slots span exactly 1 + margin seconds."""
    got, refill, inlined = db.execute(
        "SELECT wa_outbox.slot_margin(%(mps)s, %(burst)s), (wa_outbox.bucket_shape(%(mps)s, %(burst)s)).refill, "
        "wa_outbox.bucket_refill(%(mps)s, %(burst)s)", {"mps": mps, "burst": burst}).fetchone()
    assert got == pytest.approx(margin)
    assert inlined == refill  # the claim's inlined form (bucket_refill) is bucket_shape's
    if burst is None:
        assert mps / refill == pytest.approx(1 + margin)


def test_a_paced_drain_claims_its_slots_in_batches_not_one_per_finished_send(db, sender, settings, database_url):
    """A sender's backlog at its rate: a claim takes the slots of half a horizon and the producer comes back when the
    next ones are due (next_claim_in.sql). A finished send frees a thread, not a slot: woken by each, the producer
    claimed one row per send (the one slot that send's passing freed at the horizon's end), a claim statement per
    message. Claims counted, not time: a late wake-up on a busy machine only makes the claims fewer and larger."""
    from wa_outbox import db as wa_db
    from wa_outbox.worker._sender import Sender
    from wa_outbox.worker._transport import DryRunTransport

    queue(db, 90)
    paced = worker_settings(settings, "http://127.0.0.1:9", poll_interval=1.0, rate_limit_mps=40.0,
                            worker_concurrency=32)
    engine = wa_db.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    producer = Sender(engine, DryRunTransport(), paced, "worker-paced", paced.retry_policy())
    try:
        with producing(producer):
            wait_for(lambda: count(db, "status = 'sent'") >= 60, timeout=30, what="60 messages sent at 40/s")
            claims = producer.claim_rounds
    finally:
        engine.dispose()
    # 40/s, a horizon of 0.5 s: the first claim takes 20 slots, each later one about 10 (half a horizon); one per
    # finished send would be over 40 claims for these 60
    assert claims <= 20, claims
