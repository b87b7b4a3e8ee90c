"""Status and inbound-message webhooks, shaped and signed like Meta's, posted from background threads.

Shape: `{"object": "whatsapp_business_account", "entry": [{"id": <WABA id>, "changes": [{"field": "messages",
"value": {"messaging_product", "metadata": {"display_phone_number", "phone_number_id"}, "statuses" | "contacts" +
"messages"}}]}]}`, serialised compactly with non-ASCII escaped and signed with `X-Hub-Signature-256: sha256=<hex
HMAC-SHA256 of those bytes with the app secret>`, exactly the bytes a receiver must verify.

Delivery is Meta-like where a receiver's correctness depends on it: statuses arrive after the send was answered
(never inside it), possibly again (`duplicate_rate`, 1 to `duplicate_max` more times), out of order (`reorder_rate`),
several in one POST (`batch_rate`; and `webhook_max_batch` when statuses pile up behind a slow receiver), and a POST
answered with anything but 200 (or not at all) is retried with exponential backoff, a bounded number of times. One
scheduler thread keeps a heap of due deliveries and hands them to a few sender threads, so a slow receiver never
blocks the send path.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import itertools
import json
import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from .config import FINAL_STATUSES, SimulatorConfig, webhook_retry_delay
from .errors import status_error

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Hub-Signature-256"
_DUPLICATE_DELAY_S = 0.01
_STOP = object()  # tells a sender thread to exit


def encode(payload: dict[str, Any]) -> bytes:
    """Meta's serialisation: compact, non-ASCII as \\uXXXX."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=True).encode()


def signature(app_secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


def envelope(config: SimulatorConfig, phone_number_id: str, value: dict[str, Any]) -> dict[str, Any]:
    """One `messages` change for `phone_number_id` carrying `value` (statuses, or contacts + messages)."""
    number = config.number(phone_number_id)  # a number of its own names its own WABA and display number
    display = (number.display_phone_number if number else None) or config.display_phone_number
    metadata = {"display_phone_number": display, "phone_number_id": phone_number_id}
    waba_id = (number.waba if number else None) or config.waba_id
    return {"object": "whatsapp_business_account", "entry": [{"id": waba_id, "changes": [
        {"value": {"messaging_product": "whatsapp", "metadata": metadata, **value}, "field": "messages"}]}]}


# Number health (issue 20): the change fields the simulator posts for a number, as Meta shapes them
# (https://developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/phone_number_quality_update,
# .../webhooks/reference/account_update).
NUMBER_UPDATE_FIELDS = ("phone_number_quality_update", "account_update")


def number_update(config: SimulatorConfig, phone_number_id: str, field: str, value: dict[str, Any],
                  at: float) -> dict[str, Any]:
    """One `field` change about `phone_number_id`'s number (its WABA in entry[].id, sent at unix time `at`): a
    quality update names the number by its display number, as Meta's does; `value` is the rest (event, limits,
    restriction_info, ...), as given."""
    if field not in NUMBER_UPDATE_FIELDS:
        raise ValueError(f"field must be one of {', '.join(NUMBER_UPDATE_FIELDS)}")
    number = config.number(phone_number_id)
    waba_id = (number.waba if number else None) or config.waba_id
    if field == "phone_number_quality_update":
        display = (number.display_phone_number if number else None) or config.display_phone_number
        value = {"display_phone_number": display, **value}
    return {"object": "whatsapp_business_account",
            "entry": [{"id": waba_id, "time": int(at), "changes": [{"value": value, "field": field}]}]}


def status_update(message: dict[str, Any], status: str, at: float, error_code: int | None = None) -> dict[str, Any]:
    """One entry of `value.statuses[]` for a recorded message, as Meta sends it at unix time `at`."""
    update: dict[str, Any] = {"id": message["wamid"], "status": status, "timestamp": str(int(at)),
                              "recipient_id": message["wa_id"]}
    if message["biz_opaque_callback_data"] is not None:
        update["biz_opaque_callback_data"] = message["biz_opaque_callback_data"]
    if status in ("sent", "delivered"):
        category = "utility" if message["type"] == "template" else "service"
        pair = f"{message['phone_number_id']}:{message['wa_id']}".encode()
        conversation: dict[str, Any] = {"id": hashlib.md5(pair).hexdigest()}
        if status == "sent":
            conversation["expiration_timestamp"] = str(int(at) + 24 * 3600)
        conversation["origin"] = {"type": category}
        update["conversation"] = conversation
        update["pricing"] = {"billable": True, "pricing_model": "CBP", "category": category}
    if status == "failed":
        update["errors"] = [status_error(error_code or 131000)]
    return update


def plan_statuses(message: dict[str, Any], config: SimulatorConfig, rng: random.Random,
                  failed_code: int | None) -> list[tuple[float, list[dict[str, Any]]]]:
    """The status POSTs for an accepted message: (seconds after acceptance, statuses in that POST)."""
    accepted_at = message["received_at"]
    if failed_code is not None:
        steps = ["failed"]
    else:
        steps = list(FINAL_STATUSES[:FINAL_STATUSES.index(config.final_status) + 1])
    offsets = [ms / 1000 for ms in config.status_delays_ms[:len(steps)]]
    updates = [status_update(message, step, accepted_at + offset, failed_code)
               for step, offset in zip(steps, offsets, strict=True)]
    if len(updates) > 1 and rng.random() < config.reorder_rate:
        shuffled = updates[:]
        while shuffled == updates:
            rng.shuffle(shuffled)
        updates = shuffled
    if len(updates) > 1 and rng.random() < config.batch_rate:
        return [(offsets[-1], updates)]
    return [(offset, [update]) for offset, update in zip(offsets, updates, strict=True)]


def inbound_message(wa_id: str, wamid: str, at: float, *, text: str | None = None,
                    message: dict[str, Any] | None = None) -> dict[str, Any]:
    """One entry of `value.messages[]`: a text, or any message object Meta documents (`{"type": …, …}`)."""
    content = message if message is not None else {"type": "text", "text": {"body": text}}
    return {"from": wa_id, "id": wamid, "timestamp": str(int(at)), **content}


@dataclass(slots=True)
class _Delivery:
    phone_number_id: str
    statuses: list[dict[str, Any]] | None  # a status POST not yet serialised (it may still absorb others)
    body: bytes | None  # the exact bytes once built: retries and duplicates resend them unchanged
    attempt: int = 0
    duplicate: bool = False
    # The next POSTs of the same message(s), with their planned due times: scheduled once this one is settled, so
    # one message's statuses arrive in the planned order even with several sender threads.
    then: list[tuple[float, _Delivery]] = field(default_factory=list)


class WebhookDispatcher:
    """Schedules webhook POSTs and delivers them with retries. `pending` counts deliveries scheduled or in flight;
    `due` those due and waiting for a free sender thread (a signal for tests: statuses piling up)."""

    def __init__(self, app_secret: str, config: Callable[[], SimulatorConfig], rng: random.Random, senders: int = 4):
        self._app_secret = app_secret
        self._config = config
        self._rng = rng
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Delivery]] = []
        self._seq = itertools.count()
        self._pending = 0
        self._generation = 0  # bumped by clear(): deliveries of an older generation are forgotten
        self._ready: queue.Queue = queue.Queue()
        self._stats = {"posts": 0, "delivered": 0, "failed_attempts": 0, "dropped": 0, "duplicates": 0}
        self._stopping = False
        self._threads = [threading.Thread(target=self._schedule_loop, name="simulator-webhook-scheduler",
                                          daemon=True)]
        self._threads += [threading.Thread(target=self._send_loop, name=f"simulator-webhook-sender-{i}", daemon=True)
                          for i in range(senders)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for _ in self._threads[1:]:
            self._ready.put(_STOP)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))

    def schedule_statuses(self, phone_number_id: str, plan: list[tuple[float, list[dict[str, Any]]]]) -> None:
        """Post one message's statuses: `plan` is (seconds from now, statuses of one POST), in posting order."""
        now = time.monotonic()
        chain = [(now + delay_s, _Delivery(phone_number_id, statuses, None)) for delay_s, statuses in plan]
        for (_, earlier), later in itertools.pairwise(chain):
            earlier.then.append(later)
        with self._cond:
            self._pending += len(chain) - 1  # the whole chain is pending from now on
            self._push(*chain[0])

    def schedule_payload(self, payload: dict[str, Any], phone_number_id: str = "", delay_s: float = 0.0) -> None:
        """Post `payload` as it is, signed by the secret of `phone_number_id`'s app, `delay_s` from now."""
        self._push(time.monotonic() + delay_s, _Delivery(phone_number_id, None, encode(payload)))

    def clear(self) -> None:
        """Forget every pending delivery (a POST already on the wire still completes, unrecorded)."""
        with self._cond:
            self._heap.clear()
            self._generation += 1
            self._pending = 0
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is scheduled or in flight; False if `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def stats(self) -> dict[str, int]:
        with self._cond:
            return {**self._stats, "pending": self._pending, "due": self._ready.qsize()}

    def _push(self, due: float, delivery: _Delivery, *, new: bool = True) -> None:
        with self._cond:
            self._pending += new
            heapq.heappush(self._heap, (due, next(self._seq), delivery))
            self._cond.notify_all()

    def _schedule_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                if self._stopping:
                    return
                item = (self._generation, heapq.heappop(self._heap)[2])
            self._ready.put(item)

    def _send_loop(self) -> None:
        session = requests.Session()
        carried = None
        while True:
            item, carried = (carried or self._ready.get()), None
            if item is _STOP:
                session.close()
                return
            generation, delivery = item
            if generation != self._generation:
                continue
            config = self._config()
            if delivery.body is None:
                carried = self._absorb_ready(generation, delivery, config.webhook_max_batch)
                delivery.body = encode(envelope(config, delivery.phone_number_id, {"statuses": delivery.statuses}))
                delivery.statuses = None
            ok = self._post(session, config, delivery.body,
                            config.secret_of(delivery.phone_number_id, self._app_secret))
            self._settle(generation, delivery, config, ok)

    def _absorb_ready(self, generation: int, delivery: _Delivery, limit: int):
        """Merge the statuses of further ready deliveries for the same number into this POST, up to `limit`: when
        the receiver is slow, statuses pile up and go out batched, as Meta's do. Returns an item it took but could
        not merge (the caller handles it next), or None."""
        statuses = delivery.statuses
        assert statuses is not None  # a status POST not yet serialised: the caller checked
        while len(statuses) < limit:
            try:
                item = self._ready.get_nowait()
            except queue.Empty:
                return None
            if item is _STOP or item[0] != generation or item[1].statuses is None \
                    or item[1].phone_number_id != delivery.phone_number_id \
                    or len(statuses) + len(item[1].statuses) > limit:
                return item
            statuses.extend(item[1].statuses)
            delivery.then.extend(item[1].then)
            with self._cond:
                if generation == self._generation:
                    self._pending -= 1
        return None

    def _post(self, session: requests.Session, config: SimulatorConfig, body: bytes, secret: str) -> bool:
        if not config.webhook_url:
            return False
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: signature(secret, body),
                   "User-Agent": "facebookexternalua"}
        try:
            response = session.post(config.webhook_url, data=body, headers=headers, timeout=config.webhook_timeout_s)
        except requests.RequestException as exc:
            log.info("simulator: webhook POST to %s failed: %s", config.webhook_url, exc)
            return False
        if response.status_code != 200:
            log.info("simulator: webhook POST to %s answered %s", config.webhook_url, response.status_code)
        return response.status_code == 200

    def _settle(self, generation: int, delivery: _Delivery, config: SimulatorConfig, ok: bool) -> None:
        with self._cond:
            if generation != self._generation:
                return
            self._stats["posts"] += bool(config.webhook_url)
            if ok:
                self._stats["delivered"] += 1
                if not delivery.duplicate and self._rng.random() < config.duplicate_rate:
                    copies = self._rng.randint(1, config.duplicate_max) if config.duplicate_max > 1 else 1
                    self._stats["duplicates"] += copies
                    for copy in range(copies):
                        self._push(time.monotonic() + _DUPLICATE_DELAY_S * (copy + 1),
                                   _Delivery(delivery.phone_number_id, None, delivery.body, 0, True))
            elif config.webhook_url and delivery.attempt + 1 < config.webhook_max_attempts:
                self._stats["failed_attempts"] += 1
                delay = webhook_retry_delay(config, delivery.attempt)
                delivery.attempt += 1
                self._push(time.monotonic() + delay, delivery, new=False)
                return
            else:
                self._stats["failed_attempts"] += bool(config.webhook_url)
                self._stats["dropped"] += 1
                log.warning("simulator: webhook dropped after %d attempt(s)", delivery.attempt + 1)
            now = time.monotonic()
            for due, later in delivery.then:
                self._push(max(due, now), later, new=False)
            self._pending -= 1
            self._cond.notify_all()
