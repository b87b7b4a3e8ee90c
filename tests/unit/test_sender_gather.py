"""The producer's choice to let the sends in flight end before claiming (wa_outbox/worker/_sender.py gather_first):
one claim statement for all their slots when sends end sooner than a claim returns, never in a trickle."""

from __future__ import annotations

import queue
import threading

from wa_outbox.worker._sender import (
    HOLD_FACTOR,
    Sender,
    claim_room,
    drain,
    gather_first,
    is_claim_bound,
    moving_average,
)


def test_gathers_only_when_many_sends_are_in_flight_and_sends_are_quicker_than_claims():
    assert gather_first(48, 16, send_seconds=0.014, claim_seconds=0.040)
    assert not gather_first(48, 16, send_seconds=0.200, claim_seconds=0.040)  # a slow API: claim at once
    assert not gather_first(3, 16, send_seconds=0.014, claim_seconds=0.040)   # a trickle: claims stay on time
    assert not gather_first(48, 16, send_seconds=None, claim_seconds=0.040)   # nothing measured yet
    assert not gather_first(48, 16, send_seconds=0.014, claim_seconds=None)


def test_a_claim_takes_no_more_than_the_free_threads_and_holds_more_rows_only_while_sends_beat_claims():
    # sends slower than claims (a real API): a row waiting for its slot counts as a thread, as it always did
    assert claim_room(32, sending=0, holding=0, send_seconds=0.2, claim_seconds=0.02) == 32
    assert claim_room(32, sending=10, holding=30, send_seconds=0.2, claim_seconds=0.02) == 2
    assert claim_room(32, sending=0, holding=0, send_seconds=None, claim_seconds=None) == 32  # nothing measured yet
    # sends quicker than claims (a dry run, a fast API): rows waiting for their slots hold no thread
    assert claim_room(32, sending=10, holding=30, send_seconds=0.001, claim_seconds=0.02) == 22
    assert claim_room(32, sending=0, holding=32 * HOLD_FACTOR - 5, send_seconds=0.001, claim_seconds=0.02) == 5
    assert claim_room(32, sending=0, holding=32 * HOLD_FACTOR + 3, send_seconds=0.001, claim_seconds=0.02) == 0
    assert claim_room(32, sending=40, holding=40, send_seconds=0.001, claim_seconds=0.02) == 0  # never below 0


def test_moving_average_starts_at_the_first_value_and_follows():
    assert moving_average(None, 0.5) == 0.5
    assert 0.5 < moving_average(0.5, 1.5) < 1.5


class _Counter(Sender):
    """Only the in-flight counter and the wake-up of a Sender: what _gather reads."""

    def __init__(self, in_flight: int):  # no database, no transport: _gather needs neither
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._in_flight = self._sending = in_flight


def test_gather_returns_when_the_last_send_in_flight_ends():
    sender, stopping = _Counter(in_flight=2), threading.Event()
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (sender._gather(stopping, 60.0), done.set()))
    waiter.start()
    for _ in range(2):
        assert not done.is_set()
        with sender._lock:
            sender._in_flight -= 1
            sender._sending -= 1
        sender.wake.set()
    assert done.wait(10), "gather still waiting with nothing in flight"
    waiter.join()


def test_gather_gives_up_after_its_time_and_on_stop():
    sender, stopping = _Counter(in_flight=1), threading.Event()
    sender._gather(stopping, 0.01)  # returns although a send is still in flight
    stopping.set()
    sender._gather(stopping, 60.0)  # returns at once: stopping
    assert sender.in_flight == 1


def test_sends_are_claim_bound_only_when_a_claim_fills_every_free_thread_and_sends_beat_claims():
    # A drain on a saturated machine: the sends wait for the claims, so the worker's deliveries yield to them.
    assert is_claim_bound(32, 32, send_seconds=0.001, claim_seconds=0.020)
    assert not is_claim_bound(20, 32, send_seconds=0.001, claim_seconds=0.020)  # a short claim: caught up (or paced)
    assert not is_claim_bound(32, 32, send_seconds=0.250, claim_seconds=0.020)  # waiting on Meta: the CPU is free
    assert not is_claim_bound(0, 0, send_seconds=0.001, claim_seconds=0.020)    # claimed nothing
    assert not is_claim_bound(32, 32, send_seconds=None, claim_seconds=0.020)   # nothing measured yet
    assert not is_claim_bound(32, 32, send_seconds=0.001, claim_seconds=None)


# --- the recorder's batches (drain) ----------------------------------------------------------------------------------

def test_the_recorder_takes_every_outcome_waiting_in_one_batch_up_to_most():
    outcomes: queue.Queue[int] = queue.Queue()
    for i in range(30):
        outcomes.put(i)
    assert drain(outcomes, timeout=0.0, most=20) == list(range(20))
    assert drain(outcomes, timeout=0.0) == list(range(20, 30))
    assert outcomes.empty()


def test_the_recorder_takes_outcomes_that_follow_within_the_gap_past_the_first_gap():
    """Outcomes that come one after another, each within the gap of the last, join one batch (cut here by `most`;
    `longest` is never reached): the producer puts each when the recorder asks for it, no timing asserted."""
    outcomes: queue.Queue[int] = queue.Queue()
    outcomes.put(0)
    taken = threading.Event()

    def produce() -> None:
        for i in range(1, 6):
            taken.wait(5.0)   # the recorder is waiting for the next one
            taken.clear()
            outcomes.put(i)

    class Signalling(queue.Queue):  # tells the producer each time the recorder asks for the next outcome
        def get(self, block: bool = True, timeout: float | None = None) -> int:
            taken.set()
            return outcomes.get(block, timeout)

    producer = threading.Thread(target=produce)
    producer.start()
    batch = drain(Signalling(), timeout=1.0, most=6, gap=5.0, longest=60.0)
    producer.join()
    assert batch == [0, 1, 2, 3, 4, 5]


def test_an_idle_recorder_gets_nothing():
    assert drain(queue.Queue(), timeout=0.0) == []
