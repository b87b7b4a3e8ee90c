"""The outbound pipeline of one worker: claim due messages into free send threads, send them concurrently through one
pooled HTTP session, and record their outcomes in batches.

Pacing: a claim reserves each row's send slot from its sender's schedule, shared by every worker (reserve_slots in
schema.sql): slots 1/rate apart, at most SLOT_HORIZON seconds ahead. Each row's thread sleeps until its slot and
sends then, so the spacing at Meta's end is the slot spacing plus a small, nearly constant delay, whatever the claim
latency. Slots are in the database's time; the worker converts them with its estimate of the clock offset
(database_clock.sql). A row still waiting for its slot is given back unsent (queued, attempt not counted) when its
sender is throttled or paused (by this worker, or by another: pause_sender.sql NOTIFYs every worker, `on_notify`),
or when the worker stops.

While claims fill every free thread (a drain), a claim reserves no slot itself for the senders the last one took
rows for: the worker reserves them just before, in a short transaction of its own (reserve_slots_ahead.sql), and hands
the grant to the claim, so the claims of several workers for one sender do not wait for each other's commit on the
sender's schedule (`next_reservations`).

A claimed row waits for its slot without a thread: it waits in the dispatcher's heap (`_dispatch`), which hands it
to a send thread just before its slot. A claim takes no more rows than there are free threads; while sends end
sooner than a claim returns (their threads are free again long before the next claim), the rows waiting for their
slots do not count against the threads, up to HOLD_FACTOR times the threads in all (`claim_room`): with many senders
at modest rates a claim's rows wait tens of milliseconds each for their slots, and a thread that waited with each
capped the worker at threads / wait (issue 19). The lease (counted from the slot) covers every row waiting or in
flight.

When sends end sooner than a claim returns (a fast API, a busy database), the producer lets the sends in flight
end before claiming, so one statement fills all their slots: claiming each quarter of the slots on its own would
cost one statement per quarter and leave the slots freed meanwhile idle while it runs (`gather_first`).

A claim that comes back short of the free threads means the worker is caught up, or held by the senders' slots:
it then waits for what next_claim_in.sql says (the earliest due row, its sender's slot half a horizon away) or a
NOTIFY. A finished send ends that wait only when it is not for a slot or due time ahead: it frees a thread, not a
slot. A short claim whose walk left senders unvisited (`more`) is followed at once by the next.

A claim is never repeated blindly (its reply may be lost after its COMMIT). Instead the Sender tracks the ids it
holds (claimed and handed to a send thread, until their outcome is recorded); after a claim fails, it gives back
every row `sending` under its lease that it does not hold (release_unsent_claims.sql) before claiming again.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import queue
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from .. import logs, queries, template_store, templates
from ..config import ConfigError, Settings, scrub
from ..logs import one_line
from ..messages import upload_of
from ..metrics import WorkerMetrics, send_outcome
from ..retry import RetryPolicy, backoff_seconds
from ._classify import (
    ACCOUNT_BROKEN,
    BROKEN_SENDER_PAUSE_SECONDS,
    CAMPAIGN_PAUSING,
    Action,
    Decision,
    SendResult,
    classify,
    may_be_the_token,
)
from ._outcomes import Claimed, outcome, released, request_body
from ._tokens import Tokens
from ._transport import SlotMissed, Transport
from ._uploads import Prepared, Uploads

log = logging.getLogger("wa_outbox.worker")

_PAUSE_REASONS = {Action.THROTTLE_SENDER: "sender_throttled", Action.PAUSE_SENDER: "sender_paused",
                  Action.PAIR_LIMIT: "pair_limit"}
FAILURE_BACKOFF_CAP = 10.0  # seconds: the longest wait between claims while the database is away
T = TypeVar("T")
# The recorder's batches (drain): an outcome waits at most RECORD_GAP for the next one, a batch at most RECORD_LINGER.
RECORD_GAP = 0.01
RECORD_LINGER = 0.04
# Send slots are reserved at most this far ahead. Long enough for a claim to take many slots and for workers to come
# back well before the schedule runs dry (they come back when the next free slot is half a horizon away); short
# enough that a throttled sender has few sends already scheduled on other workers.
SLOT_HORIZON = 0.5
# The first slot a claim reserves is this far ahead (at most one slot interval: reserve_slots): the claim's own
# latency (the rest of the statement, its commit, the reply), so its rows reach their threads before their slot
# even on a busy machine. An idle sender's first message waits this long; a busy sender's schedule is ahead anyway.
SLOT_LEAD = 0.05
# Slots reserved ahead of a claim (a drain) start about when the claim's rows reach their threads (`ahead_lead`): a
# claim as slow as AHEAD_LEAD_MARGIN times its moving average still hands its first row over within LATE_SEND_LIMIT
# of its slot, and an average one leaves its threads little to wait (a thread waiting for its slot serves no one:
# in a drain the threads, not the rate, are the limit). At least AHEAD_LEAD_MIN, at most SLOT_LEAD. Not capped at one
# slot interval: capped, at a rate above 1 / claim time nearly every claimed row reached its thread after its slot
# and was re-slotted, a database round trip each.
AHEAD_LEAD_MARGIN = 1.5
AHEAD_LEAD_MIN = 0.002
# A re-slotted send's thread is awake and waits only for one short statement (one slot, reserve_slots_ahead).
RESLOT_LEAD = 0.005
# The promise: never more than the rate in any sliding second at Meta's end. The schedule keeps it for sends made at
# their slots (mps + 1 consecutive slots span 1.015 s: 15 ms of margin for the delay from slot to arrival); a send
# made late is what breaks it: a stall of the machine (tens of ms on a loaded one) holds back several sends, which
# then go together, closer to the sends after them than their slots are. So the sender, which alone knows when a
# request actually goes, checks at the last moment (the transport, just before the request is written: SlotMissed):
# a send more than this after its slot is not made late but re-slotted: it takes a new slot from the shared schedule
# (the schedule's end, or now if the schedule is idle: `_reslot`) and waits for that one; its old slot stays unused
# (1/rate of capacity). The same for a row whose claim answered after its slot had passed.
LATE_SEND_LIMIT = 0.010
# A send thread wakes this long before its slot: a thread's wake-up comes late on a busy machine (the process must be
# scheduled, the thread get the GIL: milliseconds), so aiming a little early keeps more sends inside the window
# [slot - SLOT_WAKE_EARLY, slot + LATE_SEND_LIMIT] the promise needs (14 ms wide, under the schedule's 15.2 ms).
SLOT_WAKE_EARLY = 0.004
# A row waiting for its slot is handed to a send thread this long before the thread's own wake-up (SLOT_WAKE_EARLY
# before the slot): the hand-over (the dispatcher's wake-up, the executor's queue, the thread's) is done by then, and
# the thread waits out the rest as it always did.
DISPATCH_AHEAD = 0.005
# While sends are quicker than claims, a worker holds up to this many times its threads' number of claimed rows, the
# rest waiting for their slots (claim_room). Two: the senders bench (1,000 senders at 1-80 mps) waits about 45 ms
# from claim to slot on average, against claims of about 20 ms, so twice the threads keeps every thread fed.
HOLD_FACTOR = 2
# A send whose new slot also slips this many times is given back (queued, attempt not counted, due at once).
RESLOT_TRIES = 3
# Of the schedule's margin, what the delay from the request to Meta's end is given (late_send_limit).
LATE_SEND_SLACK = 0.0012
CLOCK_CHECK_INTERVAL = 30.0  # seconds between estimates of the offset between the database's clock and ours
# A claim-bound verdict (`is_claim_bound`) holds this long unless a claim says otherwise first: the next claim of a
# drain comes sooner, and one that is short ends it at once.
CLAIM_BOUND_HOLD = 0.5
LATENCY_WEIGHT = 0.2        # weight of the newest claim or send in their moving averages of seconds taken


def claim_room(concurrency: int, sending: int, holding: int, send_seconds: float | None,
               claim_seconds: float | None) -> int:
    """How many rows the next claim may take: no more than the free send threads (`sending`: rows handed to a
    thread), and no more than the worker may hold in all (`holding`: claimed, not yet recorded, waiting for their
    slot or sending). It holds up to the threads' number while sends are as slow as claims or slower (a row waiting
    for its slot then would find its thread busy at its slot: as before the dispatcher, a waiting row counts as a
    thread), and HOLD_FACTOR times that while sends are quicker (a dry run, a fast API): a thread is then free again
    well within a claim's time, and rows wait for their slots in the heap, not in threads."""
    fast = send_seconds is not None and claim_seconds is not None and send_seconds < claim_seconds
    hold = concurrency * (HOLD_FACTOR if fast else 1)
    return max(0, min(concurrency - sending, hold - holding))


def gather_first(in_flight: int, min_claim: int, send_seconds: float | None, claim_seconds: float | None) -> bool:
    """Whether to let the sends in flight end before the next claim: only while many are in flight (a drain, not
    a trickle at a low rate, whose claims must stay on time) and sends take less time than a claim."""
    return (in_flight >= min_claim and send_seconds is not None and claim_seconds is not None
            and send_seconds < claim_seconds)


def is_claim_bound(claimed: int, free: int, send_seconds: float | None, claim_seconds: float | None) -> bool:
    """Whether this worker's sends are held back by its claims (the database or the CPU), not by Meta's answers: a
    claim filled every free thread (there is more to send) and sends take less time than a claim. The worker's own
    deliveries then yield (the Deliverer's `yield_to`): on a saturated machine a message goes out first and its events
    follow, rather than both going slower. Sends waiting on Meta (a send slower than a claim) or on the pacing (a
    short claim) leave the CPU idle, and deliveries run at full speed beside them."""
    return (claimed > 0 and claimed == free and send_seconds is not None and claim_seconds is not None
            and send_seconds < claim_seconds)


def ahead_lead(claim_seconds: float | None, late_limit: float = LATE_SEND_LIMIT) -> float:
    """How far ahead the first slot reserved before a claim lies: so that the claim's rows, back after its moving
    average with a margin, reach their threads no later than `late_limit` (the senders' late_send_limit) after their
    slots (sent, not re-slotted) and no sooner than needed; SLOT_LEAD before any claim."""
    if claim_seconds is None:
        return SLOT_LEAD
    lead = claim_seconds * AHEAD_LEAD_MARGIN - late_limit + AHEAD_LEAD_MIN
    return min(SLOT_LEAD, max(AHEAD_LEAD_MIN, lead))


def late_send_limit(slot_margin: float | None) -> float:
    """How long after its slot a claimed row's request may still go: its sender's schedule's margin (schema.sql,
    slot_margin; the claim returns it with each row) less the early wake-up and the request's own delay, and never
    less than LATE_SEND_LIMIT, which is that figure for every rate Meta sets (15.2 ms - 4 - 1.2). Above Meta's highest
    throughput the margin grows with the rate: at a rate no machine reaches (a "no limit" such as 10^6 mps) a drain's
    sends are never re-slotted for a late wake-up, which on two busy cores most of them were."""
    if slot_margin is None:
        return LATE_SEND_LIMIT
    return max(LATE_SEND_LIMIT, slot_margin - SLOT_WAKE_EARLY - LATE_SEND_SLACK)


def moving_average(average: float | None, seconds: float) -> float:
    return seconds if average is None else average + LATENCY_WEIGHT * (seconds - average)


def describe_outcome(entry: dict, attempt: int) -> str:
    """A send's outcome in words, for one log line: `sent (wamid.…, 80 ms)`, `retry in 2.0 s (attempt 1): …`."""
    detail = entry["detail"]
    reason = detail.get("reason") or ""
    if entry["status"] == "sent":
        return f"sent ({detail.get('wamid')}, {detail.get('ms')} ms)"
    if entry["status"] == "dead":
        return f"dead (attempt {attempt}): {reason}"
    if entry["status"] == "unknown":
        return f"unknown (attempt {attempt}), waiting for a status webhook: {reason}"
    if entry.get("refund"):
        return f"waits ({entry['event']}, attempt not counted): {reason}"
    return f"retry in {detail.get('retry_in_s')} s (attempt {attempt}): {reason}"



def drain(outcomes: queue.Queue[T], timeout: float, most: int = 1000, gap: float = RECORD_GAP,
          longest: float = RECORD_LINGER) -> list[T]:
    """The recorder's next batch: the first outcome (waiting up to `timeout`; none: []) and those that follow while
    they keep coming, each within `gap` of the last, for at most `longest` and `most` of them: one statement records
    many sends. A lone send is recorded `gap` after it ends; a stream of them (a drain whose sends go at their slots,
    one every few ms) in batches of `longest`: each record_outcomes statement has a fixed cost, and with the sends
    spread over their slots, batches cut `gap` after their first held a third as many rows as those of sends that end
    together (bench/senders.py)."""
    try:
        batch = [outcomes.get(timeout=timeout)]
    except queue.Empty:
        return []
    until = time.monotonic() + longest
    while len(batch) < most:
        left = until - time.monotonic()
        if left <= 0:
            break
        try:
            batch.append(outcomes.get(timeout=min(gap, left)))
        except queue.Empty:
            break
    return batch


def claim_pacing(settings: Settings) -> dict:
    """The claim's pacing parameters: the send-slot horizon, pair pacing and the 24-hour window rule; no slots
    reserved ahead (`reserved`: every sender's slots are reserved inside the claim); the walk over the senders
    starts at the first (`after`: next_walk_start)."""
    return {"lead": SLOT_LEAD, "horizon": SLOT_HORIZON, "pair_interval": settings.pair_rate_seconds,
            "pair_burst": settings.pair_burst, "enforce_window": settings.service_window == "enforce",
            "reserved": "[]", "after": ""}


def next_walk_start(after: str, claimed_senders: list[str]) -> str:
    """Where the next claim's walk over the senders starts: after the last sender this one claimed for, in the walk's
    order (the senders after `after` in key order, then from the first up to `after`), so that each claim goes on
    round the circle where the last stopped and every sender with due rows gets its turn, however long the backlog
    of the others. Nothing claimed: the same start."""
    if not claimed_senders:
        return after
    wrapped = [s for s in claimed_senders if s <= after]
    return max(wrapped) if wrapped else max(claimed_senders)


def next_reservations(reserved: list[queries.SlotGrant], claimed_senders: list[str], limit: int
                      ) -> tuple[list[str], dict[str, tuple[int, datetime | None]]]:
    """After a claim of up to `limit` rows: the senders to reserve slots for ahead of the next one, and the slots to
    give back now.

    `reserved` are the grants this claim got ahead (reserve_slots_ahead.sql rows), `claimed_senders` the sender of
    each row it claimed. Only a claim that filled every free thread reserves ahead next time (for the senders it
    claimed for): the queue is ahead of the worker, the claims are what limits it, and they must not wait for each
    other. A claim that found fewer rows was limited by the rate or by what was due: the next reserves inside the
    claim, as many slots as it has rows, none left unused; so does a sender that took less than a quarter of the
    batch. The slots of a grant beyond the rows claimed (the last
    ones: rows take slots in order) are given back, as (how many, the grant's slots_from, which identifies it)."""
    counts = Counter(claimed_senders)
    # Only for a sender that took a good part of the batch (a quarter): with many senders each claim serves others
    # (the walk goes on round them, claim_notifications.sql), and slots reserved ahead for them would go unused.
    ahead = sorted(s for s, n in counts.items() if 4 * n >= limit) if len(claimed_senders) >= limit else []
    unused = {g.phone_number_id: (g.granted - counts[g.phone_number_id], g.slots_from)
              for g in reserved if g.granted > counts[g.phone_number_id]}
    return ahead, unused


def clock_offset(samples: list[tuple[float, float, float]], previous: float = 0.0) -> float:
    """The database's clock minus ours, from (sent, database time, received) samples. The sample with the shortest
    round trip bounds it: the database read its clock between sent and received. The previous estimate is kept while
    it lies within those bounds (on one machine, 0 for good, however slow the round trips of a busy moment), else
    the nearest bound is taken."""
    sent, theirs, received = min(samples, key=lambda s: s[2] - s[0])
    return min(max(previous, theirs - received), theirs - sent)


class Sender:
    def __init__(self, engine: sa.Engine, transport: Transport, settings: Settings, worker_id: str,
                 policy: RetryPolicy, metrics: WorkerMetrics | None = None, tokens: Tokens | None = None):
        self.engine = engine
        # Each sender's token, cached; dropped on NOTIFY wa_outbox_registry (the listener), else checked per claim.
        self.tokens = tokens or Tokens(engine, settings, poll=not settings.listen)
        self.metrics = metrics or WorkerMetrics()  # counted here, written to Postgres with the heartbeat
        self.transport = transport
        self.uploads = Uploads(engine, transport, settings, metrics=self.metrics)  # outbound files, once per sender
        self.settings = settings
        self.worker_id = worker_id
        self.policy = policy
        self.concurrency = settings.worker_concurrency
        self.wake = threading.Event()           # set by NOTIFY, by a finished send, and by stop()
        self.nudged = threading.Event()         # set by NOTIFY and by stop() only (`nudge`): not by a finished send
        self._lock = threading.Lock()
        self._in_flight = 0                     # claimed rows not yet finished: waiting for their slot or sending
        self._sending = 0                       # of those, the ones handed to a send thread
        self._held: set[int] = set()            # claimed ids not yet recorded (or abandoned to the lease)
        self._release_pending = False           # a claim failed: its rows may be ours, unsent
        self._failures = 0                      # consecutive failed claims (or releases), for the backoff
        self._due_not_claimed = 0               # consecutive short claims with a message due now (_next_claim_in)
        self._due_later = False                 # _next_claim_in's last answer was a slot or due time ahead
        self._outcomes: queue.Queue[tuple[Claimed, Decision | None, dict]] = queue.Queue()  # None: released unsent
        slot_lock = threading.Lock()
        self._slots = threading.Condition(slot_lock)  # wakes send threads waiting for their slot: a halt, or stopping
        self._due = threading.Condition(slot_lock)    # wakes the dispatcher: a row to wait for, a halt, or stopping
        # rows waiting for their slot without a thread: (hand-over time, time.monotonic(); sequence; row; when its
        # claim started), a heap the dispatcher (`_dispatch`) empties into the send threads
        self._waiting: list[tuple[float, int, Claimed, float]] = []
        self._waiting_seq = itertools.count()
        self._look_again = False                # a halt or stopping since the dispatcher last looked at every row
        self._dispatcher: threading.Thread | None = None
        self._halted: dict[str, tuple[float, float]] = {}  # sender -> (halted at, until), time.monotonic()
        # (template name, language) -> when a send of it was refused as paused or disabled (time.monotonic()): rows
        # of it claimed before then and still waiting for their slot go back unsent (the claim then holds them)
        self._halted_templates: dict[tuple[str, str], float] = {}
        self._releasing = False                 # stopping: rows still waiting for their slot go back unsent
        self._clock_offset = 0.0                # the database's clock minus ours (seconds)
        self._clock_checked = -CLOCK_CHECK_INTERVAL  # time.monotonic() of the last estimate
        self._send_seconds: float | None = None   # moving averages (gather_first)
        self._claim_seconds: float | None = None
        self._claim_bound_until = 0.0           # time.monotonic() until which the sends count as claim-bound
        self._reserve_for: list[str] = []       # senders whose slots the next claim reserves ahead (next_reservations)
        self._late_limits: dict[str, float] = {}  # each sender's late_send_limit, as its last claimed row gave it
        self._walk_after = ""                   # the next claim walks the senders from here (next_walk_start)
        # slots to give back (right after the claim, else later)
        self._unused: dict[str, tuple[int, datetime | None]] = {}
        self._executor = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="send")
        # Python's default thread switch interval (5 ms) stays: a 1 ms one took about a fifth off full drains and
        # did not make slots more punctual (80/s, 4 workers: slot to arrival p99 2.2 ms with 5 ms, 4.9 ms with 1 ms).
        self.claim_rounds = 0                   # claim statements run (a signal for tests: "it has claimed again")
        self.stats = {"claimed": 0, "sent": 0, "retry": 0, "dead": 0, "unknown": 0, "throttled": 0, "released": 0,
                      "reslotted": 0}

    # --- producer (runs on the worker's main thread) ------------------------------------------------------------

    def produce(self, stopping: threading.Event) -> None:
        # Claim in batches: while sends are in flight, wait until a quarter of the slots are free, so one claim
        # statement serves many messages instead of one per finished send.
        min_claim = max(1, self.concurrency // 4)
        while not stopping.is_set():
            self.wake.clear()
            self.nudged.clear()  # before the claim: a NOTIFY during it (a row it may not see) ends the wait after it
            with self._lock:
                in_flight, sending = self._in_flight, self._sending
            free = claim_room(self.concurrency, sending, in_flight, self._send_seconds, self._claim_seconds)
            if free >= min_claim or (free > 0 and in_flight == 0):
                if gather_first(sending, min_claim, self._send_seconds, self._claim_seconds):
                    self._gather(stopping, self._send_seconds or 0.0)
                    with self._lock:
                        free = claim_room(self.concurrency, self._sending, self._in_flight, self._send_seconds,
                                          self._claim_seconds)
                try:
                    if time.monotonic() - self._clock_checked >= CLOCK_CHECK_INTERVAL:
                        self.check_clock()
                    if self._release_pending:
                        self.release_unsent_claims()
                    claim_started = time.monotonic()
                    rows = self._claim(free)
                except Exception as exc:  # noqa: BLE001 - the database is away: wait and try again
                    # The claim may have committed with its reply lost: give its rows back before claiming again.
                    self._release_pending = True
                    self._failures += 1
                    delay = backoff_seconds(self._failures, base=self.settings.poll_interval,
                                            cap=max(self.settings.poll_interval, FAILURE_BACKOFF_CAP))
                    log.warning("claim failed (%d in a row), next try in %.1f s: %s", self._failures, delay,
                                scrub(one_line(exc), self.settings.database_url))
                    stopping.wait(delay)
                    continue
                self._failures = 0
                self.claim_rounds += 1
                self._start_all(rows, claim_started)
                self._claim_bound_until = (time.monotonic() + CLAIM_BOUND_HOLD if is_claim_bound(
                    len(rows), free, self._send_seconds, self._claim_seconds) else 0.0)
                if len(rows) == free or (rows and rows[-1].more):
                    # there is probably more (a full claim, or a short one whose walk left senders unvisited: with
                    # many senders some rows are always over their grant or held by another worker): claim again
                    # as slots free up, not after next_claim_in (whose answer is about the earliest due row only)
                    continue
                wait = self._next_claim_in()
                # Held by a slot or a due time still ahead: a finished send frees a thread, not a slot, so only a
                # NOTIFY ends this wait early (woken by each send, a paced backlog was claimed one row per send: the
                # slot that send's passing freed at the horizon's end). Anything else (caught up; due rows another
                # worker holds) is also ended by a finished send, which catches up on what the claim left behind.
                (self.nudged if wait > 0 and self._due_later else self.wake).wait(wait)
                continue
            self.wake.wait(self.settings.poll_interval)

    def nudge(self) -> None:
        """New work (a NOTIFY) or stopping: wake the producer whatever it waits for."""
        self.nudged.set()
        self.wake.set()

    def check_clock(self) -> None:
        """Estimate how far the database's clock is from ours (send slots are in its time)."""
        samples = []
        for _ in range(5):
            sent = time.time()
            theirs = queries.database_clock(self.engine)
            samples.append((sent, theirs, time.time()))
        self._clock_offset = clock_offset(samples, self._clock_offset)
        self._clock_checked = time.monotonic()

    def _gather(self, stopping: threading.Event, seconds: float) -> None:
        """Wait until no send is in flight, at most `seconds` (about one send's time). Rows waiting for their slot
        are not waited for: they are not sending yet."""
        deadline = time.monotonic() + seconds
        while self.sending and not stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.wake.clear()
            if self.sending:
                self.wake.wait(left)

    def _next_claim_in(self) -> float:
        """Seconds to wait after a claim that left threads free: until the next queued message is due and its
        sender's next free slot is half a horizon away (next_claim_in.sql), at most the poll interval: a claim then
        takes about half a horizon of slots, and the sender's schedule never runs dry while messages wait. Due now
        yet not ours (another worker holds it): a short wait, doubling while that lasts."""
        poll = self.settings.poll_interval
        self._due_later = False
        try:
            wait = queries.next_claim_in(self.engine, horizon=SLOT_HORIZON / 2)
        except Exception:  # noqa: BLE001 - the next claim reports the database's trouble
            return poll
        if wait is None:
            return poll
        if wait > 0:
            self._due_not_claimed = 0
            self._due_later = True
            return min(wait, poll)
        self._due_not_claimed += 1
        return min(poll, 0.002 * 2 ** min(self._due_not_claimed, 10))

    def _reserve_ahead(self, limit: int, senders: list[str]) -> list[queries.SlotGrant]:
        """Reserve up to `limit` slots for each of `senders`, giving back the unused ones of the last grant first;
        the grants, for the claim. (A failed claim leaves its grants unused: lost capacity, never a rate violation.)"""
        everyone = sorted(set(senders) | set(self._unused))
        if not everyone:
            return []
        rows = queries.reserve_slots_ahead(
            self.engine, senders=everyone, wanted=[limit if s in senders else 0 for s in everyone],
            unused=[self._unused.get(s, (0, None))[0] for s in everyone],
            reserved_at=[self._unused.get(s, (0, None))[1] for s in everyone],
            default_mps=self.settings.rate_limit_mps, horizon=SLOT_HORIZON,
            lead=ahead_lead(self._claim_seconds, min((self._late_limits.get(s, LATE_SEND_LIMIT) for s in senders),
                                                     default=LATE_SEND_LIMIT)))
        self._unused = {}
        return [row for row in rows if row.phone_number_id in senders]

    def _give_back_unused(self) -> None:
        """Give back at once the slots the claim just reserved and found no row for: the sooner, the likelier they
        are still the end of the schedule (once another worker reserves slots after them, they stay unused)."""
        try:
            self._reserve_ahead(0, [])
        except Exception as exc:  # noqa: BLE001 - tried again with the next reservation; at worst capacity lost
            log.debug("giving back unused send slots failed: %s", one_line(exc))

    def _claim(self, limit: int) -> list[Claimed]:
        started = time.monotonic()
        self.tokens.before_claim()  # without the listener: has a token changed? (at most once a second)
        reserved = self._reserve_ahead(limit, self._reserve_for)
        rows = queries.claim_notifications(
            self.engine, limit=limit, worker_id=self.worker_id, lease_seconds=self.settings.lease_seconds,
            default_mps=self.settings.rate_limit_mps, **{**claim_pacing(self.settings),
            "reserved": json.dumps([grant.as_json() for grant in reserved], default=str), "after": self._walk_after})
        self.uploads.prefetch(rows)  # the Meta ids of their files, per sender: one statement, none without files
        claimed_senders = [row.phone_number_id for row in rows]
        for row in rows:  # a rate above Meta's highest lets its slots lie nearer: its sends may go later (ahead_lead)
            self._late_limits[row.phone_number_id] = late_send_limit(row.slot_margin)
        rows = self._hold_by_template(rows)
        self._reserve_for, self._unused = next_reservations(reserved, claimed_senders, limit)
        self._walk_after = next_walk_start(self._walk_after, claimed_senders)
        if self._unused:
            self._give_back_unused()
        self._claim_seconds = moving_average(self._claim_seconds, time.monotonic() - started)
        self.stats["claimed"] += len(rows)
        self.metrics.count("wa_outbox_claims_total", len(rows))
        if rows and logs.events.isEnabledFor(logging.DEBUG):
            for row in rows:
                logs.events.debug("message %s sending (attempt %d)", row.id, row.attempts,
                                  extra={"notification_id": row.id, "correlation_id": row.correlation_id})
        return rows

    def _hold_by_template(self, rows: list[Claimed]) -> list[Claimed]:
        """The claimed rows less those whose template is known to be paused, not approved (held) or disabled
        (dead): one statement for the batch, run only when it has template messages. (Raises with the database
        away: the claim counts as failed and its rows are given back, release_unsent_claims.)"""
        ids = [row.id for row in rows if templates.template_of(row.message) is not None]
        if not ids:
            return rows
        moved = queries.hold_claimed_templates(self.engine, ids=ids, worker_id=self.worker_id,
                                               **templates.held_words())
        if not moved:
            return rows
        gone = {m.id for m in moved}
        for m in moved:
            if m.action == "dead":
                self.metrics.count("wa_outbox_template_dead_letters_total")
                self.metrics.count("wa_outbox_dead_letters_total", queue="notifications")
            else:
                self.metrics.count("wa_outbox_template_holds_total", reason=m.action)
        log.info("%d claimed messages taken back for their template (held or disabled)", len(gone),
                 extra={"notification_ids": sorted(gone)[:100]})
        return [row for row in rows if row.id not in gone]

    def release_unsent_claims(self) -> list[int]:
        """Give back the rows `sending` under this worker's lease that it does not hold: a claim whose reply was lost.
        Runs on the producer's thread (the only one that claims), so no claimed row can be missing from the held
        set while it runs. Returns the ids released."""
        with self._lock:
            held = sorted(self._held)
        released = queries.release_unsent_claims(self.engine, worker_id=self.worker_id, in_flight=held)
        self._release_pending = False
        if released:
            log.warning("released %d claimed messages whose claim reply was lost: queued again, unsent",
                        len(released), extra={"notification_ids": released[:100]})
        return released

    def _start(self, row: Claimed, claim_started: float | None = None) -> None:
        self._start_all([row], time.monotonic() if claim_started is None else claim_started)

    def _start_all(self, rows: list[Claimed], claim_started: float) -> None:
        """Hold the claimed rows: each goes to a send thread at once when its slot is near (or it has none, or a file
        to upload first, before its slot), else waits in the dispatcher's heap without a thread. Rows go to the send
        threads in the order of their slots: waiting rows whose time has come go first, and every hand-over is made
        holding _slots (the dispatcher's too), so a row due at once never overtakes one whose slot came before."""
        if not rows:
            return
        with self._lock:
            self._in_flight += len(rows)
            self._held.update(row.id for row in rows)
        with self._slots:
            waited = False
            for _, _, row, started in self._due_now(time.monotonic()):
                self._submit(row, started)
            for row in rows:
                hand_over = self._hand_over_at(row)
                if hand_over is None:
                    self._submit(row, claim_started)
                else:
                    heapq.heappush(self._waiting, (hand_over, next(self._waiting_seq), row, claim_started))
                    waited = True
            if waited:
                self._due.notify()
        if waited and self._dispatcher is None:  # started with the first row that waits (tests build Senders bare)
            self._dispatcher = threading.Thread(target=self._dispatch, name="dispatcher", daemon=True)
            self._dispatcher.start()

    def _due_now(self, now: float) -> list[tuple[float, int, Claimed, float]]:
        """Take from the heap the rows whose hand-over time has come, in slot order (call holding _slots)."""
        due = []
        while self._waiting and self._waiting[0][0] <= now:
            due.append(heapq.heappop(self._waiting))
        return due

    def _hand_over_at(self, row: Claimed) -> float | None:
        """When (time.monotonic()) the row goes to a send thread: DISPATCH_AHEAD before the thread's wake-up for its
        slot. None: at once (no slot, a slot that near, or a file to upload first: the thread uploads it before the
        slot)."""
        if row.send_at is None or (upload_of(row.message) is not None and not self.settings.dry_run):
            return None
        now = time.monotonic()
        at = now + row.send_at - self._clock_offset - time.time() - SLOT_WAKE_EARLY - DISPATCH_AHEAD
        return at if at > now else None

    def _submit(self, row: Claimed, claim_started: float) -> None:
        with self._lock:
            self._sending += 1
        try:
            self._executor.submit(self._send, row, claim_started)
        except RuntimeError:  # shut down (the grace is over): its lease expires and the rescuer gives it back
            with self._lock:
                self._sending -= 1

    def _dispatch(self) -> None:
        """The dispatcher's thread: hand each waiting row to a send thread at its time; at once every row that would
        be given back unsent (`_give_back_reason`: its sender or template halted, or the worker stopping)."""
        with self._slots:
            while True:
                now = time.monotonic()
                ready = self._due_now(now)
                if self._look_again:
                    self._look_again = False
                    keep: list[tuple[float, int, Claimed, float]] = []
                    for item in self._waiting:
                        (ready if self._give_back_reason(item[2], item[3]) is not None else keep).append(item)
                    heapq.heapify(keep)
                    self._waiting = keep
                for _, _, row, claim_started in ready:  # holding _slots: in order with _start_all's hand-overs
                    self._submit(row, claim_started)
                if not ready:
                    self._due.wait(self._waiting[0][0] - now if self._waiting else None)

    def _wake_waiting(self) -> None:
        """A halt, or stopping: every row waiting for its slot looks again whether it still goes (call holding
        _slots)."""
        self._look_again = True
        self._slots.notify_all()
        self._due.notify()

    def _finished(self) -> None:
        """A row handed to a send thread is done: sent, or given back (its outcome is queued for the recorder)."""
        with self._lock:
            self._in_flight -= 1
            self._sending -= 1
        self.wake.set()

    @property
    def in_flight(self) -> int:
        """Rows claimed and not yet done: waiting for their slot or sending."""
        with self._lock:
            return self._in_flight

    @property
    def sending(self) -> int:
        """Rows handed to a send thread and not yet done."""
        with self._lock:
            return self._sending

    @property
    def claim_bound(self) -> bool:
        """The last claim found the sends held back by the claims (`is_claim_bound`), and none since said otherwise."""
        return time.monotonic() < self._claim_bound_until

    # --- a send (runs on a send thread) --------------------------------------------------------------------------

    def _wait_for_slot(self, row: Claimed, claim_started: float,
                       send_at: float | None) -> tuple[str, float] | None:
        """Sleep until the send slot `send_at` (the database's clock; None: at once). None: send it now (whether it is
        still on time is judged just before the request: `_send_in_slot`). Or (why, seconds): give it back unsent,
        due again in that many seconds: its sender was halted after it was claimed (throttled or paused: the rest
        of its schedule would draw the same answer), or the worker is stopping."""
        deadline = time.monotonic()
        if send_at is not None:
            deadline += send_at - self._clock_offset - time.time() - SLOT_WAKE_EARLY
        with self._slots:
            while True:
                give_back = self._give_back_reason(row, claim_started)
                if give_back is not None:
                    return give_back
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._slots.wait(left)

    def _give_back_reason(self, row: Claimed, claim_started: float) -> tuple[str, float] | None:
        """Why a row waiting for its slot goes back unsent, and due again in how many seconds; None: it still goes.
        (Call holding _slots.)"""
        if self._releasing:
            return "the worker stopped before its send slot", 0.0
        halt = self._halted.get(row.phone_number_id)
        if halt is not None and halt[0] >= claim_started:
            return "its sender was throttled or paused before its send slot", max(0.0, halt[1] - time.monotonic())
        if self._halted_templates and self._template_halted(row, claim_started):
            return "its template was refused (paused or disabled) before its send slot", 0.0
        return None

    def _send_in_slot(self, row: Claimed, token: str | None, claim_started: float,
                      body: dict[str, Any]) -> tuple[SendResult, float | None] | tuple[str, float]:
        """Send the row if the request can go within late_send_limit of its slot; else re-slot it (`_reslot`) and
        try at the new slot, up to RESLOT_TRIES times. (the result, the slot it went in when re-slotted, else None)
        or (why, seconds): give it back unsent."""
        send_at, reslotted, late_limit = row.send_at, None, late_send_limit(row.slot_margin)
        for _ in range(RESLOT_TRIES):
            not_after = None if send_at is None else send_at - self._clock_offset + late_limit
            try:
                return self.transport.send(row.phone_number_id, body, token, not_after=not_after), reslotted
            except SlotMissed as missed:
                self.stats["reslotted"] += 1
                self.metrics.count("wa_outbox_sends_reslotted_total")
                log.debug("message %s: its send slot slipped %.0f ms: re-slotted", row.id,
                          (missed.late_seconds + late_limit) * 1000, extra={"notification_id": row.id})
                send_at = reslotted = self._reslot(row.phone_number_id)
                if send_at is None:
                    return "its send slot slipped and its sender's schedule has no slot within the horizon", 0.0
                give_back = self._wait_for_slot(row, claim_started, send_at)
                if give_back is not None:
                    return give_back
        return f"its send slot slipped {RESLOT_TRIES} times (too late to keep the rate)", 0.0

    def _reslot(self, sender: str) -> float | None:
        """A new send slot for one row of `sender`, from the shared schedule (reserve_slots_ahead.sql, one slot): its
        end, or RESLOT_LEAD from now when it is idle. None: none within the horizon (the sender
        is paused, or the database is away)."""
        try:
            grants = queries.reserve_slots_ahead(
                self.engine, senders=[sender], wanted=[1], unused=[0], reserved_at=[None],
                default_mps=self.settings.rate_limit_mps, lead=RESLOT_LEAD, horizon=SLOT_HORIZON)
        except Exception as exc:  # noqa: BLE001 - the database is away: the row is given back
            log.debug("re-slotting a send of %s failed: %s", sender, one_line(exc))
            return None
        grant = grants[0] if grants else None
        if grant is None or not grant.granted or grant.paused or grant.slots_from is None or not grant.refill:
            return None
        return grant.slots_from.timestamp() + max(0.0, 1 - (grant.level or 0.0)) / grant.refill

    def _template_halted(self, row: Claimed, claim_started: float) -> bool:
        key = templates.template_of(row.message)
        halted = self._halted_templates.get(key) if key is not None else None
        return halted is not None and halted >= claim_started

    def _halt(self, sender: str, seconds: float) -> None:
        """Rows of `sender` from claims this worker started until now, still waiting for their slot, go back unsent.
        (A claim started later sees the sender's pause, once it is committed, and reserves nothing.)"""
        now = time.monotonic()
        with self._slots:
            self._halted[sender] = (now, now + seconds)
            self._wake_waiting()

    def on_notify(self, payload: str) -> None:
        """A NOTIFY on the workers' channel (worker/__init__.py listens): `pause <phone_number_id> <seconds left>`
        (pause_sender.sql, from any worker) halts that sender here too, at once; anything else only wakes the
        producer. Costs nothing per send: the pause arrives as the listener's wake-up, not by asking before each."""
        words = payload.split()
        if len(words) == 3 and words[0] == "pause":
            try:
                seconds = float(words[2])
            except ValueError:
                log.warning("ignored a pause notification with no duration: %r", payload[:200])
                return
            if seconds > 0:
                self._halt(words[1], seconds)

    def _send(self, row: Claimed, claim_started: float) -> None:
        prepared = self._prepare(row)  # a file to upload first: before the slot, so the send still keeps it
        if prepared is None:
            return
        # An upload refused sends nothing: its outcome is recorded at once, without waiting for the slot. A send
        # that waited for its upload past its slot is re-slotted just before its request (_send_in_slot).
        give_back = None if prepared.refused is not None else self._wait_for_slot(row, claim_started, row.send_at)
        if give_back is not None:
            self._outcomes.put((row, None, released(row, *give_back)))
            self._finished()
            return
        reslotted: float | None = None
        try:
            token = None if self.settings.dry_run else self.tokens.get(row.phone_number_id)
        except ConfigError as exc:  # no token to send with (its --token-ref variable unset, no key): pause the sender
            token, result = None, SendResult()
            decision = Decision(Action.PAUSE_SENDER, f"no access token to send with: {exc}",
                                wait_seconds=BROKEN_SENDER_PAUSE_SECONDS, alert=True)
        except Exception as exc:  # noqa: BLE001 - the database is away: back to the queue, unsent
            self._outcomes.put((row, None, released(row, f"its sender's token could not be read: {one_line(exc)}",
                                                    1.0)))
            self._finished()
            return
        else:
            try:
                if prepared.refused is not None:  # its file's upload failed: judged as a send would be
                    result, decision = SendResult(elapsed_ms=prepared.elapsed_ms), prepared.refused
                else:
                    body = prepared.body if prepared.body is not None else request_body(row)
                    sent = self._send_in_slot(row, token, claim_started, body)
                    if isinstance(sent[0], str):  # not sent: its slot slipped, and no new one could be kept
                        self._outcomes.put((row, None, released(row, sent[0], float(sent[1] or 0.0))))
                        self._finished()
                        return
                    result, reslotted = sent
                    decision = classify(result)
                    if may_be_the_token(result, decision):
                        result, decision = self._with_new_token(row, token, result, decision, body)
            except Exception as exc:  # a bug of ours mid-send: we cannot know what went out
                log.exception("send crashed", extra={"notification_id": row.id, "correlation_id": row.correlation_id})
                result, decision = SendResult(), Decision(Action.UNKNOWN,
                                                          f"send crashed: {type(exc).__name__}: {exc}")
            else:
                self.metrics.observe_send(result.elapsed_ms / 1000)
                self._send_seconds = moving_average(self._send_seconds, result.elapsed_ms / 1000)
        if decision.action in (Action.THROTTLE_SENDER, Action.PAUSE_SENDER):
            self._halt(row.phone_number_id, decision.wait_seconds or 1.0)  # at once; again once the pause is in
        if decision.action in (Action.THROTTLE_SENDER, Action.PAUSE_SENDER, Action.PAIR_LIMIT):
            try:
                self._pause(row, decision)  # now, not with the batch: every worker's next claim must see it
            except Exception as exc:  # noqa: BLE001 - the database is away: the outcome still waits out the pause
                log.warning("pausing sender %s failed: %s", row.phone_number_id, one_line(exc))
        template_status = templates.refusal_status(decision.code)
        if template_status is not None:
            self._template_refused(row, decision, template_status)
        if decision.code in CAMPAIGN_PAUSING:
            try:
                self._pause_campaign(row, decision)  # before the outcome: the retry it records stays parked
            except Exception as exc:  # noqa: BLE001 - the database is away: the message still waits out its retry
                log.warning("pausing the campaign of notification %s failed: %s", row.id, one_line(exc))
        entry = outcome(row, decision, self.policy, result.elapsed_ms)
        if reslotted is not None:  # the slot it went in, on its timeline (bench/pacing.py measures from it)
            entry["detail"]["send_at"] = reslotted
        if result.request_at is not None and row.send_at is not None:
            # when the request went, in the database's clock: the pacing promise is kept on these moments
            entry["detail"]["request_at"] = round(result.request_at + self._clock_offset, 4)
        self._outcomes.put((row, decision, entry))
        self._finished()

    def _with_new_token(self, row: Claimed, token: str | None, result: SendResult,
                        decision: Decision, body: dict | None = None) -> tuple[SendResult, Decision]:
        """A send refused for what may be its token: read the sender's token again; if it changed since (a rotation),
        send once more with the new one (the refusal sent nothing), else the refusal stands (the sender is paused).
        Costs a query only after such a refusal."""
        try:
            fresh = self.tokens.refresh(row.phone_number_id)
        except Exception as exc:  # noqa: BLE001 - the database is away: the refusal stands
            log.warning("could not read sender %s's token again: %s", row.phone_number_id, one_line(exc))
            return result, decision
        if fresh is None or fresh == token:
            return result, decision
        log.info("sender %s's token changed since this worker read it: message %s sent again with the new one",
                 row.phone_number_id, row.id, extra={"notification_id": row.id, "phone_number_id": row.phone_number_id,
                                                     "correlation_id": row.correlation_id})
        result = self.transport.send(row.phone_number_id, request_body(row) if body is None else body, fresh)
        return result, classify(result)

    def _prepare(self, row: Claimed) -> Prepared | None:
        """The row's body with Meta's media id for the file it names, uploading the file for its sender first if
        need be (worker/_uploads.py); a row without a file costs nothing here. None: the row was given back unsent
        (the database's trouble). Without a token the body is returned as is: the send then pauses the sender."""
        body = request_body(row)
        if upload_of(row.message) is None or self.settings.dry_run:  # a dry run uploads nothing, records no id
            return Prepared(body)
        try:
            token = self.tokens.get(row.phone_number_id)
            prepared = self.uploads.prepare(row, body, token)
            if prepared.refused is not None and prepared.refused.action is Action.PAUSE_SENDER \
                    and prepared.refused.code not in ACCOUNT_BROKEN:
                # Refused for what may be its token, as a send can be (_with_new_token): with a token rotated since,
                # once more with the new one.
                fresh = self.tokens.refresh(row.phone_number_id)
                if fresh is not None and fresh != token:
                    prepared = self.uploads.prepare(row, body, fresh)
            return prepared
        except ConfigError as exc:  # no token: the send below pauses the sender, as for any message
            log.debug("no token to upload with for sender %s: %s", row.phone_number_id, exc)
            return Prepared(body)
        except Exception as exc:  # noqa: BLE001 - the database is away: back to the queue, unsent
            log.warning("preparing the file of message %s failed: %s", row.id, one_line(exc),
                        extra={"notification_id": row.id, "correlation_id": row.correlation_id})
            self._outcomes.put((row, None, released(row, f"its file could not be uploaded: {one_line(exc)}", 1.0)))
            self._finished()
            return None

    # --- recorder (runs on its own thread) -----------------------------------------------------------------------

    def record(self, done: threading.Event) -> None:
        """Record outcomes in batches until `done` is set and nothing is left in flight or queued."""
        while True:
            batch = drain(self._outcomes, timeout=0.05)
            if batch:
                self._record(batch)
            elif done.is_set() and self.in_flight == 0 and self._outcomes.empty():
                return

    def _record(self, batch: list[tuple[Claimed, Decision | None, dict]]) -> None:
        self._return_pair_reservations([row.id for row, decision, _ in batch if decision is None])
        deadline = time.monotonic() + self.settings.lease_seconds
        while True:
            try:
                queries.record_outcomes(self.engine, worker_id=self.worker_id,
                                        outcomes=json.dumps([o for _, _, o in batch]))
                break
            except Exception as exc:  # noqa: BLE001 - keep the outcomes and try again; the lease is the safety net
                log.warning("recording %d outcomes failed; retrying in 1 s: %s", len(batch),
                            scrub(one_line(exc), self.settings.database_url))
                if time.monotonic() > deadline:
                    # Their ids stay held: release_unsent_claims must never give back a row that was sent.
                    log.error("gave up recording %d outcomes: their leases expire and the rescuer settles them",
                              len(batch))
                    return
                time.sleep(1.0)
        with self._lock:
            self._held.difference_update(row.id for row, _, _ in batch)
        for row, decision, entry in batch:
            self._log(row, decision, entry)

    def _return_pair_reservations(self, ids: list[int]) -> None:
        """Rows given back unsent (decision None) still count one pair interval each against their recipient: give
        those back first, while the rows are still ours (return_pair_reservations.sql says when it is safe). Once:
        a second run would take them back twice; if it fails the recipient only waits longer."""
        if not ids or self.settings.pair_rate_seconds <= 0:
            return
        try:
            queries.return_pair_reservations(self.engine, ids=ids, worker_id=self.worker_id,
                                             pair_interval=self.settings.pair_rate_seconds)
        except Exception as exc:  # noqa: BLE001 - the reservations stay: the safe side
            log.warning("could not give back the pair reservations of %d rows released unsent: %s", len(ids),
                        scrub(one_line(exc), self.settings.database_url))

    def _pause(self, row: Claimed, decision: Decision) -> None:
        """Pause the sender (throttled, or broken until a human acts) or, for 131056, just this recipient."""
        self.metrics.count("wa_outbox_throttle_pauses_total", reason=_PAUSE_REASONS[decision.action])
        if decision.action is Action.PAIR_LIMIT:
            queries.pause_recipient(self.engine, phone_number_id=row.phone_number_id, wa_id=row.recipient)
            return
        queries.pause_sender(self.engine, phone_number_id=row.phone_number_id, seconds=decision.wait_seconds or 1.0,
                             reason=decision.reason, default_mps=self.settings.rate_limit_mps)
        # Claims started before the pause was committed may have reserved slots for this sender meanwhile.
        self._halt(row.phone_number_id, decision.wait_seconds or 1.0)
        if decision.alert and decision.action is Action.PAUSE_SENDER:  # which sender needs a human
            self.metrics.count("wa_outbox_sender_alerts_total", phone_number_id=row.phone_number_id)
        (log.error if decision.alert else log.warning)(
            "sender %s paused for %.0f s: %s", row.phone_number_id, decision.wait_seconds or 1.0, decision.reason,
            extra={"alert": "sender_paused" if decision.alert else None, "phone_number_id": row.phone_number_id,
                   "correlation_id": row.correlation_id})

    def _template_refused(self, row: Claimed, decision: Decision, status: str) -> None:
        """A send refused for its template (132015 paused, 132016 disabled): before the outcome (and before this
        thread is free for the next claim), record the template's status and hold or dead-letter, in one statement,
        every queued message of it, this one included; rows of it waiting for their slot here go back unsent."""
        key = templates.template_of(row.message)
        if key is None:
            return
        with self._slots:
            self._halted_templates[key] = time.monotonic()
            self._wake_waiting()
        try:
            applied = template_store.refused(
                self.engine, phone_number_id=row.phone_number_id, name=key[0], language=key[1], status=status,
                reason=decision.reason, notification_id=row.id, worker_id=self.worker_id,
                actor=f"worker {self.worker_id}")
        except Exception as exc:  # noqa: BLE001 - the database is away: the outcome still applies (waits or dead)
            log.warning("recording template %s (%s) as %s failed: %s", key[0], key[1], status, one_line(exc))
            return
        if applied is None:
            return
        if applied.held:
            self.metrics.count("wa_outbox_template_holds_total", applied.held, reason="template_paused")
        if applied.dead:
            self.metrics.count("wa_outbox_template_dead_letters_total", applied.dead)
            if applied.dead > 1:  # the refused one is counted with its outcome
                self.metrics.count("wa_outbox_dead_letters_total", applied.dead - 1, queue="notifications")
        log.warning("template %s (%s) %s (%s): %d messages held, %d dead", key[0], key[1], status.lower(),
                    decision.code, applied.held, applied.dead,
                    extra={"notification_id": row.id, "phone_number_id": row.phone_number_id,
                           "correlation_id": row.correlation_id})

    def _pause_campaign(self, row: Claimed, decision: Decision) -> None:
        """A spam-limit or template-quality answer: pause the campaign this message belongs to (if any, and if it is
        still active), so the rest of it waits for an operator instead of drawing the same answer."""
        paused = queries.pause_campaign_of_message(self.engine, id=row.id, actor=f"worker {self.worker_id}",
                                                   reason=decision.reason)
        for campaign in paused:
            log.error("campaign %s paused after %s: %s", campaign.name, decision.code, decision.reason,
                      extra={"alert": "campaign_paused", "campaign": campaign.name, "code": decision.code,
                             "notification_id": row.id, "parked": campaign.moved,
                             "phone_number_id": row.phone_number_id, "correlation_id": row.correlation_id})

    def _log(self, row: Claimed, decision: Decision | None, entry: dict) -> None:
        if decision is None:  # given back before its slot: no send to count
            self.stats["released"] += 1
            log.info("message %s released unsent: %s", row.id, entry["detail"]["reason"],
                     extra={"notification_id": row.id, "correlation_id": row.correlation_id})
            return
        status = entry["status"]
        key = send_outcome(status, bool(entry.get("refund"))).value
        self.stats[key] += 1
        code = "none" if decision.code is None else decision.code
        self.metrics.count("wa_outbox_sends_total", outcome=key, code=code)
        if status == "dead":
            self.metrics.count("wa_outbox_dead_letters_total", queue="notifications")
        level = {"sent": logging.DEBUG, "dead": logging.WARNING}.get(status, logging.INFO)
        logger = logs.events if status == "sent" else log  # a send is the narrative; the rest, news
        if logger.isEnabledFor(level):
            logger.log(level, "message %s %s", row.id, describe_outcome(entry, row.attempts),
                       extra={"notification_id": row.id, "correlation_id": row.correlation_id,
                              "attempt": row.attempts, "detail": entry["detail"]})

    # --- shutdown ----------------------------------------------------------------------------------------------------

    def drain(self, grace_seconds: float) -> int:
        """Give back the rows still waiting for their send slot, wait for in-flight sends to finish; return how many
        are still running when the grace is up."""
        with self._slots:
            self._releasing = True
            self._wake_waiting()
        deadline = time.monotonic() + grace_seconds
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        self._executor.shutdown(wait=False, cancel_futures=True)
        return self.in_flight
