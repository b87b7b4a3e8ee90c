"""Campaigns: a named set of messages an operator imports from a CSV file and steers as one (pause, resume, cancel).

Reading the CSV and building each row's message is pure (`read_csv`); the writes are one statement per chunk
(wa_outbox/sql/enqueue_campaign.sql) and one per steering action (steer_campaign.sql). Every row is validated
with the same rules as any other message (`messages.check_request`) before anything is written.

CSV columns: `to` (required); `body.1`, `body.2`, … (positional) or `body.<name>` (named) template body
parameters; `header.1` / `header.<name>` a text header parameter, `header.image` / `header.video` /
`header.document` a media header by link; or instead of all these, `message`: a whole Cloud API message body as
JSON. https://developers.facebook.com/docs/whatsapp/cloud-api/guides/send-message-templates
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import io
import json
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

import psycopg
import sqlalchemy as sa

from . import queries
from .messages import (
    InvalidMessage,
    check_request,
    message_problem,
    message_text,
    normalize_recipient,
    size_problem,
    validate_phone_number_id,
    validate_sender,
)

CHUNK_ROWS = 5000          # rows per statement: large enough to amortize the round trip, small enough to stream
WRITERS = 2                # chunks written at once
MAX_NAME = 200             # campaigns.name CHECK
KEY_PREFIX = "campaign:"
PRIORITY = 1               # claim order: transactional messages (0) first
MEDIA_HEADERS = ("image", "video", "document")
_NAME = re.compile(rf"[^\x00-\x1f\x7f/]{{1,{MAX_NAME}}}")
_PARAM = re.compile(r"[a-z_][a-z0-9_]*")   # Meta's named parameters: lowercase letters, digits, underscores


class CampaignError(Exception):
    """An operator's request that cannot be done; str(error) says why."""


class CampaignNotFound(CampaignError):
    pass


class CampaignConflict(CampaignError):
    """The campaign's state refuses it (a cancelled campaign cannot be imported into, paused or resumed)."""


class InvalidCsv(CampaignError):
    """The file as a whole cannot be read (no header, no `to` column, unknown columns …)."""


def validate_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise CampaignError(f"a campaign name is 1 to {MAX_NAME} characters, without '/' or control characters")
    return name


# --- reading the CSV (pure) ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RowProblem:
    line: int       # the line of the file where the row starts (the header is line 1)
    reason: str


@dataclass
class ReadRows:
    # {"to", "message", "idempotency_key"} as JSON text (what import_items sends), deduplicated
    items: list[str] = field(default_factory=list)
    problems: list[RowProblem] = field(default_factory=list)
    rows: int = 0           # data rows read
    duplicates: int = 0     # rows identical to an earlier row of the file (the same key): present already


@dataclass(frozen=True)
class _Plan:
    """What each column means, decided once from the header."""
    to: int
    message: int | None                    # the `message` column, or None: a template built from parameters
    body: list[tuple[str | None, int]]     # (parameter name or None for positional, column), in order
    header: list[tuple[str | None, int]]   # text header parameters
    media: tuple[str, int] | None          # (image|video|document, column)


def _plan(header: list[str], template: str | None, lang: str | None) -> _Plan:
    names = [h.strip() for h in header]
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidCsv(f"column {name!r} appears twice in the header")
        seen.add(name)
    if "to" not in seen:
        raise InvalidCsv("the header has no `to` column (the recipient)")
    body: dict[str, int] = {}
    head: dict[str, int] = {}
    media = None
    unknown = []
    for index, name in enumerate(names):
        kind, _, param = name.partition(".")
        if name in ("to", "message"):
            continue
        if kind == "header" and param in MEDIA_HEADERS:
            if media:
                raise InvalidCsv(f"one media header per template: {media[0]} and {param}")
            media = (param, index)
        elif kind in ("body", "header") and (param.isdigit() or _PARAM.fullmatch(param)):
            (body if kind == "body" else head)[param] = index
        else:
            unknown.append(name)
    if unknown:
        raise InvalidCsv(f"unknown column(s) {', '.join(map(repr, unknown))}: expected to, body.N or body.<name>, "
                         f"header.N, header.<name> or header.image|video|document, or message")
    if "message" in seen:
        if body or head or media:
            raise InvalidCsv("a `message` column holds whole messages: it cannot be combined with body.* or "
                             "header.* columns")
        return _Plan(to=names.index("to"), message=names.index("message"), body=[], header=[], media=None)
    if not template or not lang:
        raise InvalidCsv("give --template and --lang (or a `message` column with whole message bodies)")
    return _Plan(to=names.index("to"), message=None, body=_ordered(body, "body"), header=_ordered(head, "header"),
                 media=media)


def _ordered(columns: dict[str, int], part: str) -> list[tuple[str | None, int]]:
    """Positional parameters 1..n in order (no gaps), or named ones in column order; never both."""
    positional = {int(k): v for k, v in columns.items() if k.isdigit()}
    named = [(k, v) for k, v in columns.items() if not k.isdigit()]
    if positional and named:
        raise InvalidCsv(f"{part} parameters are either positional ({part}.1, {part}.2 …) or named "
                         f"({part}.<name>), not both")
    if positional:
        if sorted(positional) != list(range(1, len(positional) + 1)):
            raise InvalidCsv(f"{part} parameters must be numbered from {part}.1 without gaps; the header has "
                             + ", ".join(f"{part}.{n}" for n in sorted(positional)))
        return [(None, positional[n]) for n in sorted(positional)]
    return sorted(named, key=lambda kv: kv[1])


def _text_parameters(plan: list[tuple[str | None, int]], cells: list[str]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": cells[column]} if name is None
            else {"type": "text", "parameter_name": name, "text": cells[column]} for name, column in plan]


def check_template_cells(plan: _Plan, cells: list[str]) -> None:
    """What a template row's own values must be, in the order build_message() reads them: text parameters not empty
    (the Cloud API refuses them), a media header a link."""
    for part, parameters in (("header", plan.header), ("media", None), ("body", plan.body)):
        if parameters is None:
            if plan.media:
                kind, column = plan.media
                link = cells[column]
                if not link.startswith(("https://", "http://")):
                    raise InvalidMessage(f"header.{kind} must be a link (https://…), not {link!r}")
            continue
        for position, (name, column) in enumerate(parameters, 1):
            if cells[column] == "":
                raise InvalidMessage(f"{part}.{name or position} is empty (the Cloud API refuses empty template "
                                     "parameters)")


def build_message(plan: _Plan, cells: list[str], template: str | None, lang: str | None) -> Any:
    """One row's Cloud API message body: the `message` cell parsed, or the template with its parameters."""
    if plan.message is not None:
        raw = cells[plan.message]
        if raw.strip() == "":
            raise InvalidMessage("the message cell is empty")
        try:
            return json.loads(raw, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as exc:
            why = exc if isinstance(exc, ValueError) else "nested too deep"
            raise InvalidMessage(f"the message cell is not JSON: {why}") from None
    check_template_cells(plan, cells)
    components = []
    header = _text_parameters(plan.header, cells)
    if plan.media:
        kind, column = plan.media
        header.append({"type": kind, kind: {"link": cells[column]}})
    if header:
        components.append({"type": "header", "parameters": header})
    body = _text_parameters(plan.body, cells)
    if body:
        components.append({"type": "body", "parameters": body})
    content: dict[str, Any] = {"name": template, "language": {"code": lang}}
    if components:
        content["components"] = components
    return {"type": "template", "template": content}


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def campaign_key(name: str, recipient: str, message: Any) -> str:
    """The idempotency key of one row of campaign `name`: the same recipient and message in the same campaign is the
    same key, so importing a file again queues nothing new (and a row repeated in the file is queued once)."""
    return KEY_PREFIX + hashlib.sha256(_canonical([name, recipient, message]).encode()).hexdigest()


_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode


class _TemplateRows:
    """A template plan's rows as JSON text, without building each row's message: the message's text and its key's
    canonical form are each put together from pieces computed once (from a message built with markers in place of
    the values) and each value's own JSON encoding, character for character what message_text() and
    campaign_key() give for the message build_message() builds (tests/db/test_campaigns.py compares them). The rules
    that do not depend on the row (type, template object) are checked once; each row's values then meet
    check_template_cells() and the size rule (message_problem's last), the only rule a row's values can break."""

    def __init__(self, plan: _Plan, name: str, template: str, lang: str) -> None:
        columns = [column for _, column in plan.header] + ([plan.media[1]] if plan.media else []) + \
                  [column for _, column in plan.body]
        # NUL cannot come from a command line nor reach this far from a CSV cell: the markers are unambiguous.
        markers = {column: f"http://\x00{column}\x00" for column in columns}
        cells = [""] * (max(columns, default=plan.to) + 1)
        for column, marker in markers.items():
            cells[column] = marker
        message = build_message(plan, cells, template, lang)
        self.usable = message_problem(message) is None  # else: the general path says why, row by row
        self._text = self._pieces(message_text(message), markers, encode_basestring)
        self._key = self._pieces(_canonical([name, "\x00to\x00", message]), {**markers, -1: "\x00to\x00"},
                                 encode_basestring_ascii)
        self.usable = self.usable and self._text is not None and self._key is not None

    @staticmethod
    def _pieces(text: str, markers: dict[int, str], encode: Callable[[str], str]) -> tuple[str, list[int]] | None:
        """text as a format string with a field where each marker's JSON string was, and the column of each field
        (-1: the recipient)."""
        literal = {encode(marker): column for column, marker in markers.items()}
        parts = re.split("(" + "|".join(map(re.escape, literal)) + ")", text) if literal else [text]
        columns = [literal[p] for p in parts[1::2]]
        if sorted(columns) != sorted(markers):
            return None  # a marker missing or twice: the general path
        return "{}".join(p.replace("{", "{{").replace("}", "}}") for p in parts[0::2]), columns

    def item(self, plan: _Plan, cells: list[str]) -> tuple[str, str]:
        """(key, the item's JSON text) of one row; InvalidMessage as the general path would say it."""
        check_template_cells(plan, cells)
        if "\x00" in "".join(cells):
            raise InvalidMessage("the row contains a NUL character (\\u0000), which Postgres cannot store")
        recipient = normalize_recipient(cells[plan.to])
        assert self._text is not None and self._key is not None  # read_csv uses only usable rows
        form, columns = self._text
        text = form.format(*[encode_basestring(cells[c]) for c in columns])
        problem = size_problem(text)
        if problem:
            raise InvalidMessage(problem)
        form, columns = self._key
        key = KEY_PREFIX + hashlib.sha256(form.format(*[encode_basestring_ascii(
            recipient if c == -1 else cells[c]) for c in columns]).encode()).hexdigest()
        return key, '{"to":"' + recipient + '","message":' + text + ',"idempotency_key":"' + key + '"}'


def read_csv(lines: Iterable[str], *, name: str, template: str | None = None,
             lang: str | None = None) -> ReadRows:
    """Every data row of the CSV, validated: the valid ones as items for enqueue_campaign, the others with their line
    and reason. Raises InvalidCsv when the file as a whole cannot be used (its header)."""
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise InvalidCsv("the file is empty: it needs a header row naming its columns (to, body.1 …)") from None
    except csv.Error as exc:
        raise InvalidCsv(f"line 1: {exc}") from None
    plan = _plan(header, template, lang)
    rows = None
    if plan.message is None and template and lang:  # (a template plan has both: _plan said so)
        rows = _TemplateRows(plan, name, template, lang)
        if not rows.usable:
            rows = None
    result = ReadRows()
    keys: set[str] = set()
    line = reader.line_num + 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            result.rows += 1
            result.problems.append(RowProblem(line, f"unreadable CSV: {exc}"))
            line = reader.line_num + 1
            continue
        start, line = line, reader.line_num + 1
        if not cells or cells == [""]:
            continue  # a blank line
        result.rows += 1
        if len(cells) != len(header):
            result.problems.append(RowProblem(start, f"{len(cells)} fields, the header has {len(header)}"))
            continue
        if rows is not None:
            try:
                key, item = rows.item(plan, cells)
            except InvalidMessage as exc:
                result.problems.append(RowProblem(start, str(exc)))
                continue
            if key in keys:
                result.duplicates += 1
            else:
                keys.add(key)
                result.items.append(item)
            continue
        try:
            message = build_message(plan, cells, template, lang)
            if plan.message is None:
                # Built here from text cells: JSON by construction, and text decoded from UTF-8 holds no lone
                # surrogate, so only NUL is left to refuse before the rules every message meets (check_request's
                # own, without its walk over the structure: a third of the import's time).
                if any("\x00" in cell for cell in cells):
                    raise InvalidMessage("the row contains a NUL character (\\u0000), which Postgres cannot store")
                recipient = normalize_recipient(cells[plan.to])
                problem = message_problem(message)
                if problem:
                    raise InvalidMessage(problem)
            else:
                recipient = check_request(to=cells[plan.to], message=message).recipient
        except InvalidMessage as exc:
            result.problems.append(RowProblem(start, str(exc)))
            continue
        key = campaign_key(name, recipient, message)
        if key in keys:
            result.duplicates += 1
            continue
        keys.add(key)
        result.items.append(_item_text({"to": recipient, "message": message, "idempotency_key": key}))
    return result


def _item_text(item: dict[str, Any]) -> str:
    return json.dumps(item, separators=(",", ":"), ensure_ascii=False)


# --- writing ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Imported:
    campaign_id: int | None
    status: str | None      # the campaign's status (a paused campaign's new messages are parked)
    imported: int
    present: int


def import_items(engine: sa.Engine, *, name: str, phone_number_id: str | None, items: Sequence[dict[str, Any] | str],
                 default_sender: str | None = None, chunk_rows: int = CHUNK_ROWS, writers: int = WRITERS,
                 progress: Callable[[int], None] | None = None) -> Imported:
    """Write validated items ({"to", "message", "idempotency_key"}, or that as JSON text, as read_csv gives them)
    in chunks, one statement (and transaction) each; the first creates or finds the campaign,
    then up to `writers` chunks are written at once (Postgres inserts on one core while this process serializes the
    next chunk on another). `engine` must be an autocommit engine with a pool of at least `writers` connections.
    A new campaign sends from `phone_number_id`, else `default_sender`, else the sender `db upgrade` recorded; an
    existing one from its own. Raises CampaignConflict for a cancelled campaign, CampaignError for another sender."""
    validate_name(name)
    validate_sender(phone_number_id)
    validate_phone_number_id(default_sender)
    chunks = [items[start:start + chunk_rows] for start in range(0, len(items), chunk_rows)]
    if not chunks:
        return Imported(None, None, 0, 0)
    progress_lock = threading.Lock()

    def write(chunk: Sequence[dict[str, Any] | str]) -> queries.CampaignChunk:
        try:
            row = queries.enqueue_campaign(
                engine, name=name, phone_number_id=phone_number_id, default_sender=default_sender,
                items="[" + ",".join(i if isinstance(i, str) else _item_text(i) for i in chunk) + "]")
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:
            raise CampaignConflict(exc.diag.message_primary) from None
        except psycopg.errors.DataError as exc:
            raise CampaignError(exc.diag.message_primary) from None
        if progress:
            with progress_lock:
                progress(len(chunk))
        return row

    rows = [write(chunks[0])]  # alone: it creates the campaign, which every later chunk then finds
    if len(chunks) > 1:
        with ThreadPoolExecutor(max_workers=max(1, writers), thread_name_prefix="import") as pool:
            rows += list(pool.map(write, chunks[1:]))
    last = rows[-1]
    return Imported(last.campaign_id, last.campaign_status, sum(r.inserted for r in rows),
                    sum(r.present for r in rows))


def steer(engine: sa.Engine, name: str, action: str, *, actor: str,
          reason: str | None = None) -> queries.CampaignSteered:
    """Pause (`reason` by default: paused by `actor`), resume or cancel campaign `name`."""
    if action == "pause" and not reason:
        reason = f"paused by {actor}"
    try:
        return queries.steer_campaign(engine, name=name, action=action, actor=actor, reason=reason)
    except psycopg.errors.NoDataFound:
        raise CampaignNotFound(f"no campaign {name!r}") from None
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:
        raise CampaignConflict(exc.diag.message_primary) from None


# --- reading ---------------------------------------------------------------------------------------------------------

def summaries(engine: sa.Engine, name: str | None = None, *, default_mps: float) -> list[dict[str, Any]]:
    """Campaigns (all, or the one named) with counts by status; for one, its rate and expected end."""
    now = datetime.datetime.now(datetime.UTC)
    return [summary(row, default_mps=default_mps, now=now)
            for row in queries.campaign_summaries(engine, name=name)]


def get(engine: sa.Engine, name: str, *, default_mps: float) -> dict[str, Any]:
    found = summaries(engine, name, default_mps=default_mps)
    if not found:
        raise CampaignNotFound(f"no campaign {name!r}")
    from .portfolios import campaign_figures  # noqa: PLC0415 - portfolios imports accounts: not on import's path
    found[0]["messaging_limit"] = campaign_figures(engine, sender=found[0]["phone_number_id"],
                                                   campaign_id=found[0]["id"])
    return found[0]


def summary(row: queries.CampaignRow, *, default_mps: float, now: datetime.datetime) -> dict[str, Any]:
    """A campaign as shown to people and the API (the JSON object GET /v1/campaigns gives). Pure. The expected end is
    the earliest the sender's rate allows for what is still waiting (it shares that rate with transactional
    messages, which go first)."""
    counts = {k: int(v) for k, v in (row.counts or {}).items()}
    waiting = counts.get("queued", 0) + counts.get("sending", 0)
    mps = float(row.sender_mps if row.sender_mps is not None else default_mps)
    expected_end = None
    if row.status == "active" and mps > 0:
        expected_end = now + datetime.timedelta(seconds=waiting / mps)
    return {
        "id": row.id, "name": row.name, "status": row.status, "pause_reason": row.pause_reason,
        "phone_number_id": row.phone_number_id, "total": int(row.total), "counts": counts,
        "waiting": waiting, "rate_mps": mps,
        "sent_per_second_last_minute": (None if row.sent_last_minute is None
                                        else round(row.sent_last_minute / 60.0, 2)),
        "started_at": row.started_at, "expected_end_at": expected_end,
        "created_at": row.created_at, "updated_at": row.updated_at,
    }


def read_lines(data: bytes) -> io.StringIO:
    """A CSV file's bytes as text: UTF-8, with or without the byte-order mark spreadsheets write."""
    try:
        return io.StringIO(data.decode("utf-8-sig"), newline="")
    except UnicodeDecodeError as exc:
        raise InvalidCsv(f"the file is not UTF-8 (byte {exc.start}): save it as CSV UTF-8") from None
