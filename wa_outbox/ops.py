"""What the /ops page reads and does: its reads (wa_outbox/sql/ops_*.sql through wa_outbox/queries/, each served by
an index) with the page's limits, its dead-letter group actions, and the pure arithmetic behind its charts. The views
in wa_outbox/web/ops_views.py only render these. Single messages are wa_outbox/outbox.py's."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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
