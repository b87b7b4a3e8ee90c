"""The push engine of one worker: events become deliveries (dispatch), deliveries are claimed under a lease, POSTed
signed to their endpoints on this engine's own threads, and their outcomes recorded in batches.

One thread (`run`) does the database work in a loop: dispatch when woken by NOTIFY wa_outbox_events (the worker's
listener) or every poll interval, then claim due deliveries for its threads and as many again ahead (AHEAD;
claim_deliveries.sql: fairly across endpoints; ordered endpoints one delivery per conversation at a time); a thread
whose POST ends takes the next claimed one whose endpoint has fewer than WA_OUTBOX_DELIVERY_PER_ENDPOINT POSTs in
flight. Another (`_record_loop`) records the outcomes in batches as they come, so that a claim never waits behind a
record (each a statement and its commit): with both on one thread, the delivery threads spent half the push waiting
for rows (bench/deliveries.py --profile). WA_OUTBOX_DELIVERY_CONCURRENCY threads do the HTTP (`_push.py`), apart
from the send threads: a slow or dead endpoint never slows sends, webhook processing, or (beyond its own few
threads) another endpoint. delivery_policy.py judges each answer. When the machine is saturated and the worker's
sends are held back by it (Sender.claim_bound), the loop yields: one round a second until the sends catch up, so a
message goes out first and its events follow, rather than both going slower.

At least once: a delivery is `delivering` under a lease while its POST runs; a worker that dies leaves it to the
rescuer (rescue_deliveries.sql), which queues it again once the lease expires. A receiver deduplicates by the
webhook-id, the same on every attempt.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy as sa

from .. import queries
from ..config import Settings, scrub
from ..delivery_policy import DisabledReason, Verdict, judge
from ..events import envelope_bytes, event_id
from ..logs import one_line
from ..metrics import DeliveryOutcome, WorkerMetrics
from ..retry import backoff_seconds
from ..secret_box import SecretBox
from ..states import DeliveryStatus
from ._priority import lower_priority
from ._push import PushResult, PushTransport, signature_header
from ._sender import drain as take_batch

log = logging.getLogger("wa_outbox.deliveries")

DISPATCH_BATCH = 1000       # events per endpoint per dispatch statement
# Due deliveries an endpoint may have waiting for a thread before its dispatch waits (dispatch_events.sql): rows
# written far ahead of the threads cost a drain beside them (bench/deliveries.py) and buy nothing. The dispatch
# counts them, up to this many per endpoint, each time it runs: under a burst of webhooks (a dispatch per 50 ms, the
# backlog full) counting to 1,000 made it the costliest of the deliveries' statements (1.8 ms a run, two endpoints).
# A dispatch still writes up to DISPATCH_BATCH, and one is asked for every DISPATCH_BACKLOG // 2 claims: the due
# deliveries are topped up while at least that many wait, before the threads run out.
DISPATCH_BACKLOG = 250
FAILURE_BACKOFF_CAP = 10.0  # seconds: the longest wait between rounds while the database is away
RESCUE_LIMIT = 1000
HELD_WINDOW = 120.0         # seconds back the rescuer looks for held deliveries whose wake-up was missed
HELD_SWEEP_ROUNDS = 60      # ... and every this many rounds (the first too), at every held delivery
HELD_SWEEP_WINDOW = 10 * 365 * 86400.0
LEASE_MARGIN = 10.0         # seconds a delivery's lease outlasts its longest possible POST
# While the worker's sends are claim-bound (`yield_to`: the machine is saturated and messages wait for it), the loop
# runs one round (dispatch, claim) every YIELD_ROUND_INTERVAL seconds, not whenever it can: its deliveries
# never stop, and the sends get the CPU. It looks again every YIELD_CHECK seconds, so it goes back to full speed
# within that of the sends catching up.
YIELD_ROUND_INTERVAL = 1.0
YIELD_CHECK = 0.05
# The recorder's batches: outcomes taken while they keep coming, each within RECORD_GAP of the last, for at most
# RECORD_LINGER. Short, unlike the sends' (worker/_sender.py): the next event of an ordered conversation waits for
# its predecessor's record.
RECORD_GAP = 0.002
RECORD_LINGER = 0.010
# Deliveries claimed ahead: a worker holds up to AHEAD times its threads' worth of claimed deliveries (AHEAD times
# WA_OUTBOX_DELIVERY_PER_ENDPOINT for one endpoint), so that a thread whose POST ends takes the next one at once
# instead of waiting for the loop's next claim (a statement and its commit: ~2 ms on a busy machine, longer than a
# POST to a fast receiver; bench/deliveries.py). POSTs in flight stay within the threads and the per-endpoint share.
AHEAD = 2
# Dispatches asked for by NOTIFY (events written) go at most one per DISPATCH_GAP seconds: webhooks arriving at
# thousands a second notify hundreds of times a second, and a dispatch each, with the claims behind them, moved two
# rows per statement (bench/deliveries.py, ingest). A quiet feed's event still goes at once; under load, one
# statement takes DISPATCH_GAP's worth. A full batch (more waiting) is dispatched again at once.
DISPATCH_GAP = 0.05



class Deliverer:
    def __init__(self, engine: sa.Engine, settings: Settings, worker_id: str, metrics: WorkerMetrics,
                 transport: PushTransport | None = None, yield_to: Callable[[], bool] | None = None) -> None:
        self.engine = engine
        self.yield_to = yield_to  # True while the worker's own sends need the CPU more (Sender.claim_bound)
        self.settings = settings
        self.worker_id = worker_id
        self.metrics = metrics
        self.policy = settings.delivery_policy()
        self.concurrency = settings.delivery_concurrency
        self.per_endpoint = settings.delivery_per_endpoint
        self.capacity = AHEAD * self.concurrency  # deliveries held: POSTing, or claimed and waiting for a thread
        # The lease covers the longest a delivery may take (connect, then the read timeout) and, claimed ahead, the
        # wait for a thread (at most as long: the POSTs before it), with a margin: the sends' WA_OUTBOX_LEASE_SECONDS,
        # or longer when WA_OUTBOX_DELIVERY_TIMEOUT asks for it.
        self.lease_seconds = max(settings.lease_seconds, AHEAD * 2 * settings.delivery_timeout + LEASE_MARGIN)
        self.transport = transport or PushTransport(timeout=settings.delivery_timeout,
                                                    allow_private=settings.endpoints_allow_private,
                                                    pool_size=settings.delivery_per_endpoint)
        self.wake = threading.Event()        # a delivery ended, events were written (NOTIFY), or stop
        self.dispatch_wanted = threading.Event()
        self.claim_wanted = threading.Event()
        self._since_dispatch = 0
        self._last_dispatch = float("-inf")  # time.monotonic() of the last dispatch
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()     # endpoint id -> deliveries claimed and not ended (posting or ready)
        self._posting: Counter[str] = Counter()  # endpoint id -> POSTs in flight
        self._ready: deque[queries.ClaimedDelivery] = deque()  # claimed, waiting for a thread, in the claim's order
        self._runners = 0                        # delivery threads at work (each takes ready rows until none fits)
        self._outcomes: queue.Queue[tuple[queries.ClaimedDelivery, PushResult, dict]] = queue.Queue()
        # Deliveries are the worker's background work: its threads run at WA_OUTBOX_DELIVERY_NICE (_priority.py)
        self._executor = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="deliver",
                                            initializer=lower_priority, initargs=(settings.delivery_nice,))
        self._box: SecretBox | None = None
        self._secrets: dict[bytes, str] = {}  # decrypted secrets by their stored token
        self._rescues = 0
        # since the loop's last round: deliveries ended (their threads free) + batches recorded (which may have woken
        # ordered deliveries behind them): a claim may find more
        self._progress = 0
        self._gone_pending = 0  # 410 answers not yet recorded (and their endpoints disabled): no claim meanwhile
        self.rounds = 0                        # loop rounds done (a signal for tests)
        self.yielded_rounds = 0                # ... of which while yielding to the sends
        self._next_yield_round = 0.0           # time.monotonic() of the next round while yielding
        self.stats: Counter[str] = Counter()

    @property
    def in_flight(self) -> int:
        """Deliveries claimed and not ended: POSTing, or waiting for a thread."""
        with self._lock:
            return sum(self._held.values())

    def on_deliveries(self, by: str = "") -> None:
        """NOTIFY wa_outbox_deliveries: another worker's dispatch (`by`, its id) wrote deliveries; claim them now.
        (This worker's own dispatch is followed by its claim anyway.)"""
        if by != self.worker_id:
            self.claim_wanted.set()
            self.wake.set()

    def on_events(self) -> None:
        """NOTIFY wa_outbox_events: events were committed; dispatch them now."""
        self.dispatch_wanted.set()
        self.wake.set()

    # --- the loop (its own thread) ---------------------------------------------------------------------------------

    def run(self, stopping: threading.Event) -> None:
        """The loop, on a thread of the worker's own (its niceness is lowered to WA_OUTBOX_DELIVERY_NICE, as the
        recorder's and the delivery threads')."""
        lower_priority(self.settings.delivery_nice)
        # Claim in batches: once room for the threads' worth (half the capacity) is free, or nothing is held, so that
        # one claim statement serves many deliveries rather than a few each; the other half, claimed ahead, keeps every
        # thread busy meanwhile. (At half the threads' worth, claims moved 6 deliveries each under webhook ingest, and
        # their statements were a third of the deliveries' Postgres CPU; now about 11, at the same push rate.)
        min_claim = max(1, self.concurrency)
        failures = 0
        next_dispatch = 0.0  # the next poll's dispatch
        more = False         # the last dispatch took a full batch: there is more
        recorder = threading.Thread(target=self._record_loop, args=(stopping,), name="deliveries-recorder",
                                    daemon=True)
        recorder.start()
        while not stopping.is_set():
            yielding = self.yield_to is not None and self.yield_to()
            if yielding:
                now = time.monotonic()
                if now < self._next_yield_round:
                    stopping.wait(min(YIELD_CHECK, self._next_yield_round - now))
                    continue
                self._next_yield_round = now + YIELD_ROUND_INTERVAL
                self.yielded_rounds += 1
            self.wake.clear()
            self.claim_wanted.clear()
            busy = False
            try:
                with self._lock:
                    progress, self._progress = self._progress, 0
                now = time.monotonic()
                if more or now >= next_dispatch or self._dispatch_due(now):
                    self.dispatch_wanted.clear()
                    self._since_dispatch = 0
                    self._last_dispatch = now
                    next_dispatch = now + self.settings.poll_interval
                    # yielding: only as many events as the round can take, not a backlog of rows written early
                    more = self.dispatch(self.concurrency if yielding else DISPATCH_BATCH)
                    busy = more or busy
                in_flight = self.in_flight
                # yielding: no deliveries claimed ahead, a round's worth at most
                free = (self.concurrency if yielding else self.capacity) - in_flight
                # Not while a 410 waits for its record: the delivery goes back to the queue as a retry before its
                # endpoint is disabled, and a claim in between (the recorder is another thread) would POST it again.
                if not self._gone_pending and (free >= min_claim or (free > 0 and in_flight == 0)):
                    claimed = self.claim(free)
                    # Half the back-pressure's backlog claimed since the last dispatch: dispatch again before the
                    # due deliveries run out (the dispatch writes more once fewer than DISPATCH_BACKLOG wait), not
                    # once they have, with every thread waiting for its statement.
                    self._since_dispatch += claimed
                    if self._since_dispatch >= DISPATCH_BACKLOG // 2:
                        self.dispatch_wanted.set()
                    busy = claimed == free or busy
                    # Threads left free while deliveries flow: the feed may hold more events than the last dispatch
                    # took (its batch, or the back-pressure held them). Dispatch again now rather than at the next
                    # poll or NOTIFY: a backlog would otherwise go at one batch per poll interval. Once a round
                    # neither records nor claims anything, this stops.
                    if claimed < free and (progress or claimed):
                        self.dispatch_wanted.set()
                failures = 0
            except Exception as exc:  # noqa: BLE001 - the database is away (or a bug): wait, then go on
                failures += 1
                self._back_off(stopping, "deliveries round", failures, exc)
                continue
            finally:
                self.rounds += 1
            if not busy:
                self._idle(stopping, min_claim)
        self.drain(self.settings.shutdown_grace, recorder)

    def _back_off(self, stopping: threading.Event, what: str, failures: int, exc: Exception) -> None:
        """After the `failures`-th failure in a row of the loop or the recorder: one log line, then a capped wait."""
        delay = backoff_seconds(failures, base=self.settings.poll_interval,
                                cap=max(self.settings.poll_interval, FAILURE_BACKOFF_CAP))
        log.warning("%s failed (%d in a row), next try in %.1f s: %s", what, failures, delay,
                    scrub(one_line(exc), self.settings.database_url))
        stopping.wait(delay)

    def _idle(self, stopping: threading.Event, min_claim: int) -> None:
        """Wait up to a poll interval: until events are written, deliveries are dispatched (NOTIFY) while there is
        room, or deliveries ended and room for min_claim is free (or nothing is held)."""
        deadline = time.monotonic() + self.settings.poll_interval
        while not stopping.is_set():
            now = time.monotonic()
            left = deadline - now
            if left <= 0 or self._dispatch_due(now):
                return
            if self.dispatch_wanted.is_set():  # wanted, within DISPATCH_GAP of the last: wait for the gap's end
                left = min(left, self._last_dispatch + DISPATCH_GAP - now)
            self.wake.clear()
            in_flight = self.in_flight
            if self.claim_wanted.is_set() and in_flight < self.capacity:
                return
            if self._progress and (self.capacity - in_flight >= min_claim or in_flight == 0):
                return
            self.wake.wait(left)

    def _dispatch_due(self, now: float) -> bool:
        return self.dispatch_wanted.is_set() and now >= self._last_dispatch + DISPATCH_GAP

    def dispatch(self, batch: int = DISPATCH_BATCH) -> bool:
        """Turn committed events (at most `batch` per endpoint) into deliveries for every enabled endpoint; True when
        a batch was full."""
        rows = queries.dispatch_events(self.engine, batch=batch, backlog=DISPATCH_BACKLOG, by=self.worker_id)
        return any(row.scanned >= batch for row in rows)

    def claim(self, free: int) -> int:
        """Claim up to `free` deliveries (at most AHEAD x the per-endpoint share held for one endpoint) and put
        threads to work on them."""
        with self._lock:
            held = json.dumps({k: v for k, v in self._held.items() if v})
        rows = queries.claim_deliveries(self.engine, worker_id=self.worker_id, lease_seconds=self.lease_seconds,
                                        limit=free, per_endpoint=AHEAD * self.per_endpoint, held=held)
        with self._lock:
            for row in rows:
                self._held[row.endpoint_id] += 1
                self._ready.append(row)
            start = min(self.concurrency - self._runners, len(self._ready))
            self._runners += start
        for _ in range(start):
            self._executor.submit(self._run_ready)
        return len(rows)

    # --- the delivery threads --------------------------------------------------------------------------------------

    def _run_ready(self) -> None:
        """A delivery thread: deliver the ready rows, each the first in the claim's order whose endpoint has fewer
        than its share of POSTs in flight, until none is left that may start (a row held back by its endpoint's
        share starts on the thread of one of that endpoint's POSTs, when it ends)."""
        while True:
            with self._lock:
                row = next((r for r in self._ready if self._posting[r.endpoint_id] < self.per_endpoint), None)
                if row is None:
                    self._runners -= 1
                    return
                self._ready.remove(row)
                self._posting[row.endpoint_id] += 1
            self._deliver(row)

    def _deliver(self, row: queries.ClaimedDelivery) -> None:
        try:
            result = self._post(row)
        except Exception as exc:  # a bug of ours: recorded as a failed attempt, retried
            log.exception("delivery %s crashed", row.id)
            result = PushResult(error=f"delivery crashed: {type(exc).__name__}: {exc}"[:500])
        outcome = self._outcome(row, result)
        if outcome["verdict"] == Verdict.GONE:
            with self._lock:
                self._gone_pending += 1
        self._outcomes.put((row, result, outcome))
        with self._lock:
            self._posting[row.endpoint_id] -= 1
            self._held[row.endpoint_id] -= 1
            self._progress += 1
        self.wake.set()

    def _post(self, row: queries.ClaimedDelivery) -> PushResult:
        body = envelope_bytes(row.event_seq, row.type, row.occurred_at, row.data)
        msg_id = event_id(row.event_seq)
        try:
            secrets = [self._secret(row.secret_enc)]
            if row.previous_signs and row.previous_secret_enc is not None:
                secrets.append(self._secret(row.previous_secret_enc))
        except Exception as exc:  # noqa: BLE001 - no key, or a key that does not decrypt it: the message says which
            return PushResult(error=f"cannot sign: {one_line(exc)}")
        timestamp = int(time.time())
        headers = {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
                   "webhook-signature": signature_header(secrets, msg_id, timestamp, body)}
        return self.transport.post(row.url, body, headers)

    def _secret(self, token: bytes) -> str:
        token = bytes(token)
        secret = self._secrets.get(token)
        if secret is None:
            if self._box is None:
                self._box = SecretBox.of(self.settings, "endpoint secrets")
            secret = self._box.decrypt(token)
            if len(self._secrets) > 1000:
                self._secrets.clear()
            self._secrets[token] = secret
        return secret

    def _outcome(self, row: queries.ClaimedDelivery, result: PushResult) -> dict:
        verdict = judge(result.status_code)
        next_in = None
        if verdict is Verdict.DELIVERED:
            status = DeliveryStatus.DELIVERED
        else:
            # 410 too: the endpoint is disabled and this delivery keeps its place (and its attempts) in the queue
            next_in = self.policy.next_attempt_in(row.tries, result.retry_after)
            status = DeliveryStatus.FAILED if next_in is None else DeliveryStatus.QUEUED
        error = result.error
        if error is None and verdict is not Verdict.DELIVERED:
            error = f"HTTP {result.status_code}" + (" (redirects are not followed)"
                                                    if 300 <= (result.status_code or 0) < 400 else "")
        return {"id": row.id, "endpoint_id": row.endpoint_id, "attempt": row.attempts, "status": status.value,
                "next_in": next_in, "status_code": result.status_code, "latency_ms": round(result.latency_ms, 3),
                "response_head": result.head, "error": error, "verdict": verdict.value}

    # --- recording (the recorder's thread) -------------------------------------------------------------------------

    def _record_loop(self, stopping: threading.Event) -> None:
        """Record outcomes in batches as they come, until stop (drain() records the last ones); a record ends
        deliveries and wakes ordered ones behind them, so the loop is woken to claim."""
        lower_priority(self.settings.delivery_nice)
        failures = 0
        while not stopping.is_set():
            batch = take_batch(self._outcomes, timeout=self.settings.poll_interval, gap=RECORD_GAP,
                          longest=RECORD_LINGER)
            if not batch:
                continue
            try:
                self._record(batch)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - the database is away (or a bug): the batch waits, then again
                failures += 1
                self._back_off(stopping, "recording deliveries", failures, exc)
                continue
            with self._lock:
                self._progress += 1
            self.wake.set()

    def record_waiting(self) -> int:
        """Record every outcome waiting, in one statement; disable the endpoints the policy says to."""
        batch = []
        while True:
            try:
                batch.append(self._outcomes.get_nowait())
            except queue.Empty:
                break
        if batch:
            self._record(batch)
        return len(batch)

    def _record(self, batch: list[tuple[queries.ClaimedDelivery, PushResult, dict]]) -> None:
        try:
            failing = queries.record_deliveries(self.engine, worker_id=self.worker_id,
                                                outcomes=json.dumps([entry for _, _, entry in batch]))
        except Exception:
            for item in batch:  # kept for the next round; the lease is the safety net
                self._outcomes.put(item)
            raise
        disable = {entry["endpoint_id"]: DisabledReason.GONE for _, _, entry in batch
                   if entry["verdict"] == Verdict.GONE}
        try:
            for endpoint in failing:
                if endpoint.endpoint_id not in disable and self.policy.failing_too_long(endpoint.failing_since,
                                                                                         endpoint.now):
                    disable[endpoint.endpoint_id] = DisabledReason.FAILING
            if disable:
                self._disable(disable)
        finally:  # recorded: the claims go on (a disable that failed is made again at the next 410)
            gone = sum(entry["verdict"] == Verdict.GONE for _, _, entry in batch)
            if gone:
                with self._lock:
                    self._gone_pending -= gone
            for row, result, entry in batch:
                self._count(row, result, entry)

    def _disable(self, disable: dict[str, DisabledReason]) -> None:
        done = queries.disable_endpoints(self.engine, disabled=json.dumps(
            [{"id": endpoint, "reason": reason.value} for endpoint, reason in disable.items()]))
        for endpoint in done:
            self.metrics.count("wa_outbox_endpoints_disabled_total", reason=endpoint.reason)
            why = ("it answered 410 Gone" if endpoint.reason == DisabledReason.GONE else
                   f"it failed continuously for {self.policy.disable_after_days:g} days")
            log.error("endpoint %s disabled: %s (`wa-outbox endpoints enable %s` resumes its queued deliveries)",
                      endpoint.id, why, endpoint.id,
                      extra={"alert": "endpoint_disabled", "endpoint_id": endpoint.id, "reason": endpoint.reason})

    def _count(self, row: queries.ClaimedDelivery, result: PushResult, entry: dict) -> None:
        if entry["verdict"] == Verdict.GONE:
            outcome = DeliveryOutcome.GONE
        else:
            outcome = {DeliveryStatus.DELIVERED: DeliveryOutcome.DELIVERED,
                       DeliveryStatus.QUEUED: DeliveryOutcome.RETRY,
                       DeliveryStatus.FAILED: DeliveryOutcome.FAILED}[DeliveryStatus(entry["status"])]
        self.stats[outcome.value] += 1
        self.metrics.count("wa_outbox_deliveries_total", outcome=outcome.value)
        if outcome is not DeliveryOutcome.DELIVERED:
            log.info("delivery %s of %s to %s, attempt %d: %s%s", row.id, event_id(row.event_seq), row.endpoint_id,
                     row.attempts, entry["error"],
                     "" if entry["next_in"] is None else f"; next attempt in {entry['next_in']:.1f} s",
                     extra={"endpoint_id": row.endpoint_id, "delivery_id": row.id, "status": entry["status"]})

    # --- rescue and shutdown ---------------------------------------------------------------------------------------

    def rescue(self) -> int:
        """Expired leases, and held ordered deliveries whose wake-up was missed: the recent ones every round, all of
        them every HELD_SWEEP_ROUNDS rounds (a wake-up missed while no worker could run maintenance)."""
        self._rescues += 1
        window = HELD_SWEEP_WINDOW if self._rescues % HELD_SWEEP_ROUNDS == 1 else HELD_WINDOW
        rescued = queries.rescue_deliveries(self.engine, limit=RESCUE_LIMIT, max_attempts=self.policy.max_attempts,
                                            held_window=window)
        if rescued:
            log.warning("rescued %d deliveries from expired leases (%d failed: their last attempt was lost)",
                        len(rescued), sum(r.status == DeliveryStatus.FAILED for r in rescued))
        return len(rescued)

    def drain(self, grace_seconds: float, recorder: threading.Thread | None = None) -> int:
        """Stop: wait (within the grace) for the deliveries in flight, record their outcomes; return how many were
        still in flight (their leases expire and the rescuer queues them again)."""
        deadline = time.monotonic() + grace_seconds
        while self.in_flight and time.monotonic() < deadline:
            self.wake.wait(0.05)
            self.wake.clear()
        left = self.in_flight
        if recorder is not None:  # its batch in hand is recorded (or put back) before the last ones here
            recorder.join(max(0.0, deadline - time.monotonic()) + 1.0)
        try:
            self.record_waiting()
        except Exception as exc:  # noqa: BLE001 - the leases bring them back
            log.warning("could not record the last deliveries: %s", scrub(one_line(exc), self.settings.database_url))
        self._executor.shutdown(wait=False, cancel_futures=True)
        if left:
            log.warning("%d deliveries still in flight at the end of the grace: their leases expire and they are "
                        "delivered again", left)
        return left

    def close(self) -> None:
        self.transport.close()
