"""Output formatting: tab-separated lines (escaped as COPY's text format), JSON lines, and a message shown for
people."""

from __future__ import annotations

import dataclasses
import json as _json
from typing import TYPE_CHECKING, Any

import click

from ..messages import format_phone
from ..states import hold_reason_text

if TYPE_CHECKING:
    from ..queries import Notification


_JSON_TYPE_OIDS = {114, 3802, 199, 3807}  # json, jsonb, json[], jsonb[]

# Backslash, tab, newline and carriage return in a value, escaped as PostgreSQL's COPY text format (and
# mysql --batch) does: a value never splits a column or a line.
_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _tsv(cells) -> str:
    """One line of tab-separated output, each cell escaped (_TSV_ESCAPES): every TSV line the CLI prints is made
    here."""
    return "\t".join(str(cell).translate(_TSV_ESCAPES) for cell in cells)


def _cell(value, is_json: bool) -> str:
    """A value for tab-separated output: JSON for json/jsonb (and arrays), never a Python repr; NULL is empty."""
    if value is None:
        return ""
    if is_json or isinstance(value, (dict, list)):
        return _json.dumps(value, default=_json_default, ensure_ascii=False)
    return str(value)


def _json_default(value):
    import datetime
    import decimal
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, memoryview)):
        return "\\x" + bytes(value).hex()
    return str(value)



def _echo_json(row: Any) -> None:
    """One result as one line of JSON on stdout (`--json`): a dict, or a row of wa_outbox.queries (its fields in
    their order, the keys the dict rows had)."""
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        row = dataclasses.asdict(row)
    click.echo(_json.dumps(row, default=_json_default, ensure_ascii=False))


def _print_notification(n: Notification) -> None:
    click.echo(f"message {n.id}: {n.status} (attempt {n.attempts}"
               + (f"/{n.max_attempts})" if n.max_attempts else ")"))
    click.echo(f"  to {format_phone(n.recipient)} from {n.phone_number_id}, wamid {n.wamid or '-'}, "
               f"correlation id {n.correlation_id or '-'}")
    if n.hold_reason:  # queued, but held by more than its schedule: say by what, and when it goes
        click.echo(f"  held ({n.hold_reason}): {hold_reason_text(n.hold_reason)}")
    if n.sent_at:  # the outcome first: how far it got, and when
        click.echo("  " + " · ".join(f"{word} {at:%Y-%m-%d %H:%M:%S}" for word, at in (
            ("sent", n.sent_at), ("delivered", n.delivered_at), ("read", n.read_at)) if at))
    if n.last_error and n.error_is_history:  # shown after the outcome, as history, never as why it is where it is
        click.echo(f"  error history: {n.last_error.get('message')} (an earlier attempt's; it is {n.status} now)")
    elif n.last_error:
        click.echo(f"  last error: {n.last_error.get('message')}")
    for e in n.timeline:
        detail = {k: v for k, v in (e.get("detail") or {}).items() if v is not None}
        click.echo(f"  {e['at'][:23]}  {e['event']:<16} attempt {e['attempt']}  "
                   f"{_json.dumps(detail, ensure_ascii=False) if detail else ''}")

