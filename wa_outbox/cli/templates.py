"""`wa-outbox templates`: the message templates wa-outbox knows (from Meta's webhooks and `sync`), and the messages
each holds (wa_outbox/templates.py decides what a status means for them)."""

from __future__ import annotations

import dataclasses

import click

from ._common import _engine, _settings
from ._errors import CliError
from ._output import _cell, _echo_json, _tsv

_COLUMNS = ["waba_id", "name", "language", "status", "quality", "category", "held", "category_pending",
            "category_change_at", "reason", "updated_at"]
_JSON = click.option("--json", "as_json", is_flag=True, help="One JSON object per template.")


@click.group()
def templates() -> None:
    """Message templates: their status, quality and category, and the messages a paused one holds."""


def _row_json(row) -> dict:
    return dataclasses.asdict(row)


@templates.command("list")
@click.option("--waba", "waba_id", metavar="WABA_ID", help="Only this business account's.")
@click.option("--status", help="Only templates in this status (APPROVED, PAUSED, DISABLED, …).")
@click.option("--name", help="Only templates of this name (every language).")
@_JSON
def templates_list(waba_id: str | None, status: str | None, name: str | None, as_json: bool) -> None:
    """The templates, one per line (tab-separated, with a header), or one JSON object per line."""
    from .. import queries
    rows = queries.templates_list(_engine(_settings()), waba_id=waba_id, status=status, name=name)
    if as_json:
        for row in rows:
            _echo_json({k: v for k, v in _row_json(row).items() if k != "components"})
        return
    click.echo(_tsv(_COLUMNS))
    for row in rows:
        click.echo(_tsv(_cell(getattr(row, c), False) for c in _COLUMNS))


@templates.command("show")
@click.argument("name")
@click.option("--language", help="Its language code (needed when the name has several).")
@click.option("--waba", "waba_id", metavar="WABA_ID", help="Its business account (needed when several have it).")
@_JSON
def templates_show(name: str, language: str | None, waba_id: str | None, as_json: bool) -> None:
    """One template, whole (its components too)."""
    from .. import queries
    rows = queries.templates_list(_engine(_settings()), waba_id=waba_id, name=name, language=language)
    if not rows:
        raise CliError(f"no template {name}" + (f" ({language})" if language else "") +
                       (f" of WABA {waba_id}" if waba_id else "") + " is known (`wa-outbox templates sync`)")
    if len(rows) > 1:
        found = ", ".join(f"{r.language} of WABA {r.waba_id}" for r in rows)
        raise CliError(f"template {name} is known in several: {found}; give --language (and --waba)")
    row = rows[0]
    if as_json:
        _echo_json(_row_json(row))
        return
    for column in [*_COLUMNS, "template_id", "status_at", "synced_at", "created_at", "components"]:
        click.echo(f"{column}: {_cell(getattr(row, column), column == 'components')}")


@templates.command("sync")
@click.option("--waba", "waba_ids", metavar="WABA_ID", multiple=True,
              help="The business account whose templates to read (repeatable; default: every registered one).")
@_JSON
def templates_sync(waba_ids: tuple[str, ...], as_json: bool) -> None:
    """Read each WABA's templates from Meta (GET /{waba-id}/message_templates, every page) with one of its senders'
    tokens, and record them: a template now paused holds its queued messages, one approved again releases them, one
    disabled dead-letters them. A known template the whole listing no longer has is recorded as DELETED (its held
    messages go, and Meta's answer decides)."""
    from .. import accounts
    from ..template_sync import SyncError, sync
    settings = _settings()
    engine = _engine(settings)
    wabas = list(waba_ids) or sorted({s.waba_id for s in accounts.senders(engine, settings) if s.waba_id})
    if not wabas:
        raise CliError("no registered business account to sync (`wa-outbox senders add ID --waba WABA_ID …`)")
    failed = []
    for waba in wabas:
        try:
            done = sync(engine, settings, waba, actor="cli")
        except SyncError as exc:
            failed.append(waba)
            click.echo(f"wa-outbox: WABA {waba}: {exc}", err=True)
            continue
        a = done.applied
        if as_json:
            _echo_json({"waba_id": waba, "pages": done.pages, "templates": done.templates,
                        "vanished": done.vanished, "held": a.held,
                        "released": a.released, "dead": a.dead, "campaigns_paused": a.campaigns_paused})
        else:
            click.echo(f"WABA {waba}: {done.templates} templates ({done.pages} pages)"
                       + (f", {done.vanished} no longer listed (DELETED)" if done.vanished else "")
                       + f"; messages held {a.held}, "
                       f"released {a.released}, dead {a.dead}" +
                       (f"; campaigns paused: {', '.join(a.campaigns_paused)}" if a.campaigns_paused else ""))
    if failed:
        raise CliError(f"could not sync {len(failed)} of {len(wabas)} business accounts: {', '.join(failed)}")
