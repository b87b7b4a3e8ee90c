"""`wa-outbox portfolios`: business portfolios and Meta's messaging limit (portfolios.py, messaging_limit.py)."""

from __future__ import annotations

import click

from ._accounts import cell, refusals
from ._common import _engine, _settings
from ._output import _echo_json, _tsv

_JSON = click.option("--json", "as_json", is_flag=True, help="The result as JSON (one object per portfolio).")
_COLUMNS = ["portfolio_id", "messaging_limit", "used_24h", "remaining", "next_unit_frees_at", "queued",
            "held_by_limit", "limit_source", "business_accounts", "senders"]


def _limit_text(value: int | None) -> str:
    return "unlimited" if value is None else str(value)


def _row(r) -> list:
    return [r.portfolio_id, _limit_text(r.messaging_limit), r.used, cell(r.remaining), cell(r.next_unit_frees_at),
            r.queued, r.held, cell(r.limit_source), cell(r.business_accounts), cell(r.senders)]


def _show(r, as_json: bool, **extra) -> None:
    if as_json:
        from dataclasses import asdict
        _echo_json({**asdict(r), **extra})
        return
    click.echo(f"portfolio {r.portfolio_id}")
    source = f" (set by {r.limit_source}, {r.updated_at})" if r.limit_source else ""
    click.echo(f"  messaging limit: {_limit_text(r.messaging_limit)}{source}")
    if r.messaging_limit is not None:
        frees = f"; the oldest unit frees at {r.next_unit_frees_at}" if r.next_unit_frees_at else ""
        click.echo(f"  last 24 hours: {r.used} customers counted, {r.remaining} left{frees}")
    click.echo(f"  messages waiting: {r.queued} queued, {r.held} held by the limit")
    click.echo(f"  business accounts: {cell(r.business_accounts) or '-'}; senders: {cell(r.senders) or '-'}")


@click.group()
def portfolios() -> None:
    """Business portfolios: Meta's messaging limit (unique customers reached outside a service window in 24 h)."""


@portfolios.command("list")
@_JSON
def portfolios_list(as_json) -> None:
    """Every business portfolio: its limit, used and remaining in the last 24 hours, messages waiting."""
    from .. import portfolios as ops
    rows = ops.portfolios(_engine(_settings()))
    if as_json:
        for r in rows:
            _echo_json(r)
        return
    click.echo(_tsv(_COLUMNS))
    for r in rows:
        click.echo(_tsv(_row(r)))


@portfolios.command("show")
@click.argument("portfolio_id")
@_JSON
def portfolios_show(portfolio_id, as_json) -> None:
    """One portfolio: its limit, used and remaining in the last 24 hours, when a unit frees, messages waiting."""
    from .. import portfolios as ops
    with refusals():
        row = ops.portfolio(_engine(_settings()), portfolio_id)
    _show(row, as_json)


@portfolios.command("set")
@click.argument("portfolio_id")
@click.option("--messaging-limit", "messaging_limit", required=True, metavar="N|unlimited",
              help="Unique customers per moving 24 hours (Meta's tier: 250, 2000, 10000, 100000) or 'unlimited'.")
@_JSON
def portfolios_set(portfolio_id, messaging_limit, as_json) -> None:
    """Set a portfolio's messaging limit; a raised limit releases the messages it held at once."""
    from .. import portfolios as ops
    with refusals():
        row, released = ops.set_limit(_engine(_settings()), portfolio_id=portfolio_id,
                                      messaging_limit=messaging_limit)
    if not as_json:
        click.echo(f"portfolio {row.portfolio_id}: messaging limit {_limit_text(row.messaging_limit)}"
                   + (f", {released} held message(s) released" if released else ""))
    _show(row, as_json, released=released)
