"""What the /ops page reads and does: its reads (wa_outbox/sql/ops_*.sql through wa_outbox/queries/, each served by
an index) with the page's limits, its dead-letter group actions, and the pure arithmetic behind its charts. The views
in wa_outbox/web/ops_views.py only render these. Single messages are wa_outbox/outbox.py's."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from . import accounts, outbox, queries
from .config import Settings
from .messages import InvalidMessage, normalize_recipient
from .queries import WORKER_ALIVE_SECONDS  # noqa: F401 - the page's rule for `alive` (queries.WorkerRow.alive)

MAX_ID = 2 ** 63 - 1  # ids are bigint
MAX_QUERY_CHARS = 512  # longer than any id, phone number, correlation id (255) or wamid
GROUP_BATCH = 1000  # ids per statement when a whole dead-letter group is retried or purged
DEPTH_CAP = 10_000  # the page's queue counts stop here: a backlog's order of magnitude is what it needs


# --- reads ------------------------------------------------------------------------------------------------------

def queue_depth(engine: sa.Engine, *, cap: int = DEPTH_CAP) -> list[queries.QueueDepth]:
    """Rows per live state, counted up to `cap` (`capped` then says there are more), and the oldest one's age."""
    return queries.ops_queue_depth(engine, cap=cap)


def throughput(engine: sa.Engine) -> list[queries.MinuteFlows]:
    """Sixty rows, one per minute of the last hour, oldest first: entered, sent, failed, dead, cancelled."""
    return queries.ops_throughput(engine)


# Minutes older than this many before the current one are over: no event is written in them any more (an event's
# created_at is its insert's clock, and the statements that write them last well under a minute), so the page
# keeps their counts instead of reading them again at every refresh.
SETTLED_MINUTES = 2


@dataclass
class _Settled:
    lock: threading.Lock = field(default_factory=threading.Lock)
    until: datetime.datetime | None = None          # rows cover the minutes before it
    rows: list[queries.SenderMinute] = field(default_factory=list)


_settled: dict[str, _Settled] = {}
_settled_lock = threading.Lock()


def sender_outcomes(engine: sa.Engine, minutes: Sequence[queries.MinuteFlows]) -> list[SenderOutcomes]:
    """Each sender's outcomes over the last hour, minute by minute on `minutes` (ops_throughput's axis). The minutes
    that are over are kept in this process (per database) and only the last few are read again: with auto-refresh
    on, an open page costs a few minutes of the timeline per refresh, not an hour of it (ops_sender_outcomes.sql).
    A message purged within the hour keeps counting in the minutes kept: its events did happen."""
    axis = [m.minute for m in minutes]
    if not axis:
        return []
    settled = axis[-1] - datetime.timedelta(minutes=SETTLED_MINUTES)
    with _settled_lock:
        cache = _settled.setdefault(engine.url.render_as_string(hide_password=True), _Settled())
    with cache.lock:  # one refresh at a time per database: the others wait for it rather than read the hour too
        if cache.until is not None and axis[0] <= cache.until <= axis[-1]:
            kept = [r for r in cache.rows if r.minute >= axis[0]]
            since: datetime.datetime | None = cache.until
        else:
            kept, since = [], None
        rows = kept + queries.ops_sender_outcomes(engine, since=since)
        cache.rows = [r for r in rows if r.minute < settled]
        cache.until = settled
    return outcome_series(rows, axis)


def forget_settled_outcomes() -> None:
    """Drop the kept minutes (tests that write the past)."""
    with _settled_lock:
        _settled.clear()


def workers(engine: sa.Engine) -> list[queries.WorkerRow]:
    return queries.ops_workers(engine)


def senders(engine: sa.Engine, settings: Settings) -> list[queries.SenderRow]:
    """Every sender: registered ones with their account and token source, the environment's, and any other number
    with a rate or a pause."""
    return queries.ops_senders(engine, **accounts.environment_sender(settings))


def unregistered(engine: sa.Engine, *, limit: int = 20) -> list[queries.UnregisteredRow]:
    """Numbers and business accounts webhooks arrived for in the last 24 hours that are not registered."""
    return queries.ops_unregistered(engine, limit=limit)


def dead_groups(engine: sa.Engine, *, groups: int = 50, samples: int = 5) -> list[queries.DeadGroup]:
    return queries.ops_dead_groups(engine, groups=groups, samples=samples)


def campaigns(engine: sa.Engine, *, limit: int = 20) -> list[queries.CampaignOnPage]:
    return queries.ops_campaigns(engine, limit=limit)


def endpoints(engine: sa.Engine, *, limit: int = 50, attempts: int = 5) -> list[queries.EndpointOnPage]:
    """The endpoints with their latest attempts (status, latency); disabled ones get the page's banner."""
    return queries.ops_endpoints(engine, limit=limit, attempts=attempts, cap=DEPTH_CAP)


@dataclass(frozen=True)
class SearchTerms:
    """What one search box entry can be: a message id, a phone number, a correlation id or a wamid."""
    id: int | None
    recipient: str | None
    term: str


def search_terms(q: str) -> SearchTerms:
    """Pure: the readings of a search entry. Digits are both an id and (normalized) a phone number; any text may be
    a correlation id or a wamid. Raises ValueError for an entry no message can match (NUL, too long)."""
    term = q.strip()
    if not term:
        raise ValueError("type a message id, phone number, correlation id or wamid")
    if "\x00" in term or len(term) > MAX_QUERY_CHARS:
        raise ValueError(f"a search is text of at most {MAX_QUERY_CHARS} characters, without NUL")
    digits = term[1:] if term.startswith("#") else term
    message_id = int(digits) if digits.isascii() and digits.isdigit() and 0 < int(digits) <= MAX_ID else None
    try:
        recipient = normalize_recipient(term)
    except InvalidMessage:
        recipient = None
    return SearchTerms(id=message_id, recipient=recipient, term=term)


def search(engine: sa.Engine, terms: SearchTerms, *, limit: int = 50) -> list[queries.SearchHit]:
    return queries.ops_search(engine, id=terms.id, recipient=terms.recipient, term=terms.term, limit=limit)


# --- actions ------------------------------------------------------------------------------------------------------

def _dead_group_batches(engine: sa.Engine, code: str, up_to_id: int) -> Iterable[list[int]]:
    before_id = None
    while True:
        ids = queries.ops_dead_group_ids(engine, code=code, up_to_id=up_to_id, before_id=before_id,
                                         limit=GROUP_BATCH)
        if not ids:
            return
        yield ids
        before_id = ids[-1]


def retry_dead_group(engine: sa.Engine, *, code: str, up_to_id: int, actor: str) -> int:
    """Requeue the dead messages of one error code ('' for none) up to the newest id the operator saw, in batches
    through outbox.requeue (one statement each). Returns how many were requeued."""
    return sum(len(outbox.requeue(engine, ids=ids, actor=actor))
               for ids in _dead_group_batches(engine, code, up_to_id))


def purge_dead_group(engine: sa.Engine, *, code: str, up_to_id: int) -> int:
    """Delete the dead messages of one error code up to `up_to_id`, with their timelines (outbox.purge_dead)."""
    return sum(outbox.purge_dead(engine, ids=ids) for ids in _dead_group_batches(engine, code, up_to_id))


# --- charts (pure) ---------------------------------------------------------------------------------------------------

def depth_series(current_depth: int, minutes: Sequence[queries.MinuteFlows]) -> list[int]:
    """The waiting queue's depth at the end of each minute, worked back from its depth now and each minute's flows
    (entered: queued, requeued; left: sent, dead, cancelled): depth at the end of minute i is the depth now minus what
    entered, plus what left, after it. An estimate (a resend after `unknown` enters without a `queued` event), so
    never below zero."""
    depths = [0] * len(minutes)
    depth = current_depth
    for i in range(len(minutes) - 1, -1, -1):
        depths[i] = max(0, depth)
        minute = minutes[i]
        depth -= minute.entered - (minute.sent + minute.dead + minute.cancelled)
    return depths


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    value: int
    label: str


def bars(values: Sequence[int], labels: Sequence[str], *, width: float = 240, height: float = 48,
         gap: float = 1) -> list[Bar]:
    """Pure: one bar per value, scaled so the largest fills `height` (all zero: no bar is drawn taller than 0)."""
    if not values:
        return []
    top = max(values) or 1
    step = width / len(values)
    return [Bar(x=round(i * step, 2), y=round(height - value / top * height, 2), width=round(max(step - gap, 0.5), 2),
                height=round(value / top * height, 2), value=value, label=label)
            for i, (value, label) in enumerate(zip(values, labels, strict=True))]


def line_points(values: Sequence[int], *, width: float = 240, height: float = 48) -> str:
    """Pure: an SVG polyline's points for `values` spread over `width`, the largest at the top."""
    if not values:
        return ""
    top = max(values) or 1
    step = width / max(len(values) - 1, 1)
    return " ".join(f"{round(i * step, 2)},{round(height - v / top * height, 2)}" for i, v in enumerate(values))


# --- labels (pure) ---------------------------------------------------------------------------------------------------

# What the page calls each queue: the operator's words, not the tables' (ops_queue_depth.sql names them by table).
QUEUE_LABELS = {"notifications": "outbound", "webhook_events": "inbound"}


def queue_label(queue: str) -> str:
    return QUEUE_LABELS.get(queue, queue.replace("_", " "))


# --- outcomes per sender (pure) --------------------------------------------------------------------------------------

OUTCOMES = ("sent", "delivered", "read", "failed", "dead")


@dataclass(frozen=True)
class SenderOutcomes:
    """One sender's last hour: per outcome, one count per minute (oldest first), and its totals and rates."""
    phone_number_id: str
    alias: str | None
    display_phone_number: str | None
    series: dict[str, list[int]]

    def total(self, outcome: str) -> int:
        return sum(self.series[outcome])

    @property
    def delivery_rate(self) -> float | None:
        return rate(self.total("delivered"), self.total("sent"))

    @property
    def read_rate(self) -> float | None:
        return rate(self.total("read"), self.total("delivered"))


def rate(part: int, whole: int) -> float | None:
    """Pure: part / whole as a fraction of 1, None when there is no whole. Both are counts of events in the same
    hour, so `part` may include messages whose earlier step fell before it (a message sent at 09:59 and delivered at
    10:00): the rate is capped at 1, never 'more than all'."""
    if whole <= 0:
        return None
    return min(part / whole, 1.0)


def outcome_series(rows: Iterable[queries.SenderMinute], minutes: Sequence[Any]) -> list[SenderOutcomes]:
    """Pure: the query's sparse (sender, minute) rows as one full series per outcome and sender over `minutes`;
    rows for a minute outside them are dropped; a sender's alias and display number are its last row's. Senders by
    phone number id."""
    index = {minute: i for i, minute in enumerate(minutes)}
    found: dict[str, SenderOutcomes] = {}
    for row in rows:
        at = index.get(row.minute)
        if at is None:
            continue
        sender = found.get(row.phone_number_id)
        series = sender.series if sender else {outcome: [0] * len(minutes) for outcome in OUTCOMES}
        # the registry's labels of the latest row (kept minutes come first): a renamed alias shows at once
        sender = found[row.phone_number_id] = SenderOutcomes(
            phone_number_id=row.phone_number_id, alias=row.alias, display_phone_number=row.display_phone_number,
            series=series)
        for outcome in OUTCOMES:
            sender.series[outcome][at] += getattr(row, outcome)
    return [found[k] for k in sorted(found)]


def outcome_totals(senders: Sequence[SenderOutcomes], length: int) -> dict[str, list[int]]:
    """Pure: every sender's series added up, minute by minute (the page's charts: the sum of its senders' rows)."""
    totals = {outcome: [0] * length for outcome in OUTCOMES}
    for sender in senders:
        for outcome in OUTCOMES:
            for i, value in enumerate(sender.series[outcome]):
                totals[outcome][i] += value
    return totals


# --- what a worker reports doing (pure) ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Activity:
    """One line of a worker's activity: what it works on, and its figures in words ("42 sent")."""
    area: str
    parts: tuple[str, ...]


# The counters of a worker's heartbeat (worker/__init__.py's _info: its sender's, inbound processor's and
# deliverer's stats, all since the worker started), each as the words the page shows. Keys are matched by prefix
# in this order (the unprefixed sender's last), shown in _AREA_ORDER; a key of no area (a counter a newer worker
# reports) is still shown, under "other".
_ACTIVITY_AREAS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("deliveries_", "pushes to endpoints", (
        ("in_flight", "in flight"), ("delivered", "delivered"), ("retry", "to retry"), ("failed", "failed"),
        ("gone", "gone (410)"))),
    ("inbound_", "inbound webhooks", (
        ("processed", "processed"), ("statuses", "statuses"), ("messages", "messages"), ("failed", "failed"),
        ("dead", "dead"), ("unrecognized_statuses", "unrecognized statuses"), ("lease_lost", "leases lost"))),
    ("", "outbound messages", (
        ("in_flight", "in flight"), ("claimed", "claimed"), ("sent", "sent"), ("retry", "retried"),
        ("unknown", "unknown (reconciling)"), ("throttled", "throttled"), ("dead", "dead"),
        ("released", "given back"))),
)
_AREA_ORDER = ("outbound messages", "inbound webhooks", "pushes to endpoints", "other")
_ALWAYS_SHOWN = {"in_flight", "sent", "processed", "delivered"}  # the rest only when not zero


def worker_activity(info: Mapping[str, Any]) -> list[Activity]:
    """Pure: a heartbeat's counters as a readable summary, one line per area (outbound, inbound, pushes), the
    figures that are not zero (in flight and the main one always), in the order an operator reads them."""
    remaining = dict(info)
    lines: list[Activity] = []
    for prefix, area, words in _ACTIVITY_AREAS:
        parts = []
        for key, phrase in words:
            value = remaining.pop(prefix + key, None)
            if value is None:
                continue
            if value or key in _ALWAYS_SHOWN:
                parts.append(f"{_figure(value)} {phrase}")
        if parts:
            lines.append(Activity(area=area, parts=tuple(parts)))
    other = [f"{key.replace('_', ' ')} {_figure(value)}" for key, value in sorted(remaining.items())
             if value not in (0, None, "", [], {})]
    if other:
        lines.append(Activity(area="other", parts=tuple(other)))
    return sorted(lines, key=lambda line: _AREA_ORDER.index(line.area))


def _figure(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.3g}"
