"""Claimed rows wait for their send slot without a thread (wa_outbox/worker/_sender.py, the dispatcher): they are
handed to a send thread just before their slot, and at once when they are to go back unsent (their sender halted,
the worker stopping). No database: a dry-run Sender, rows built by hand, its outcome queue read directly."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from tests.live import wait_for
from wa_outbox.config import Settings
from wa_outbox.queries.senders import Claimed
from wa_outbox.worker._sender import DISPATCH_AHEAD, SLOT_WAKE_EARLY, Sender
from wa_outbox.worker._transport import DryRunTransport

A, B = "100000000000001", "100000000000002"


class Recording(DryRunTransport):
    """A dry run that notes when each request went (time.time()), by row, and on which thread."""

    def __init__(self) -> None:
        self.went: dict[str, float] = {}
        self.order: list[str] = []
        self.threads: set[str] = set()

    def send(self, phone_number_id, body, token=None, not_after=None):
        self.went[body["biz_opaque_callback_data"]] = time.time()  # the outbox id
        self.order.append(body["biz_opaque_callback_data"])
        self.threads.add(threading.current_thread().name)
        return super().send(phone_number_id, body, token, not_after)


def rows(sender: str, first_id: int, send_at: list[float]) -> list[Claimed]:
    return [Claimed(id=first_id + i, phone_number_id=sender, recipient=f"5511900000{first_id + i:03d}",
                    message={"type": "text", "text": {"body": "x"}},
                    attempts=1, max_attempts=None, correlation_id=None, send_at=at)
            for i, at in enumerate(send_at)]


@pytest.fixture(params=[2])
def sender(request):
    settings = dataclasses.replace(Settings.from_env({}), dry_run=True, worker_concurrency=request.param)
    transport = Recording()
    me = Sender(engine=None, transport=transport, settings=settings, worker_id="w",
                policy=settings.retry_policy())
    yield me, transport
    me.drain(0)


def outcomes(me: Sender, n: int) -> list[tuple]:
    got: list[tuple] = []
    wait_for(lambda: got.extend(me._outcomes.get_nowait() for _ in range(me._outcomes.qsize())) or len(got) >= n,
             timeout=30, what=f"{n} outcomes")
    return got


def test_rows_waiting_for_their_slots_hold_no_send_thread_and_each_goes_at_its_slot(sender):
    me, transport = sender
    now = time.time()
    slots = [now + 3 + 0.05 * i for i in range(6)]  # three times the threads, all due in the same 0.3 s
    me._start_all(rows(A, 1, slots), time.monotonic())
    with me._slots:  # hand-overs are made holding _slots: nothing moves while we look
        waiting = {item[2].id for item in me._waiting}
        # every row whose hand-over time has not come (with a margin: a stalled test may look late) waits in the
        # heap, and only the rows handed over hold a thread
        not_yet = {row.id for row in rows(A, 1, slots)
                   if time.time() < row.send_at - SLOT_WAKE_EARLY - DISPATCH_AHEAD - 0.05}
        assert not_yet <= waiting, "a row waiting for its slot took a send thread"
        assert me.sending == 6 - len(waiting)
    got = outcomes(me, 6)
    assert sorted(entry["status"] for _, _, entry in got) == ["sent"] * 6
    for row in rows(A, 1, slots):  # never before its slot (less the thread's early wake-up)
        assert transport.went[str(row.id)] >= row.send_at - SLOT_WAKE_EARLY - 0.001
    assert len(transport.threads) <= 2
    wait_for(lambda: me.in_flight == 0 and me.sending == 0, what="nothing held after the outcomes")


def test_a_halted_senders_waiting_rows_go_back_at_once_and_the_others_wait_on(sender):
    me, transport = sender
    later = time.time() + 60
    me._start_all(rows(A, 1, [later] * 3) + rows(B, 11, [later] * 2), time.monotonic())
    me._halt(A, 5.0)  # throttled: its rows go back now, not at their slots a minute away
    got = outcomes(me, 3)
    assert sorted(row.id for row, _, _ in got) == [1, 2, 3]
    assert all(decision is None and "throttled or paused" in entry["detail"]["reason"] for _, decision, entry in got)
    assert not transport.went
    wait_for(lambda: me.in_flight == 2, what="B's two rows still held")
    assert me.sending == 0


def test_a_stopping_worker_gives_back_the_rows_still_waiting_for_their_slots(sender):
    me, transport = sender
    me._start_all(rows(A, 1, [time.time() + 60] * 4), time.monotonic())
    assert me.drain(20) == 0
    got = outcomes(me, 4)
    assert all(decision is None and "stopped" in entry["detail"]["reason"] for _, decision, entry in got)
    assert not transport.went


@pytest.mark.parametrize("sender", [1], indirect=True)
def test_a_row_due_at_once_never_overtakes_a_waiting_row_whose_time_has_come(sender):
    """One send thread, so the sends go in the order the rows were handed over: a row whose hand-over time has come
    while the dispatcher has not yet woken (a busy machine) still goes before a row claimed later and due at once."""
    me, transport = sender
    [waiting] = rows(A, 1, [time.time() + 1])
    with me._slots:  # as if the dispatcher were late: its hand-over time passed a second ago
        me._waiting.append((time.monotonic() - 1, 0, waiting, time.monotonic()))
    with me._lock:
        me._in_flight += 1
    me._start_all(rows(A, 2, [None]), time.monotonic())  # no slot: due at once
    outcomes(me, 2)
    assert transport.order == ["1", "2"]
