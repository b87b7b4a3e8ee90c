"""`wa-outbox dlq`: the dead-letter queue."""

from __future__ import annotations

import click

from ..messages import format_phone
from ._common import _engine, _settings
from ._output import _echo_json, _print_notification, _tsv


@click.group()
def dlq() -> None:
    """The dead-letter queue: messages that could not be sent (dead) or that Meta reported failed, with reasons."""


@dlq.command("list")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 500))
@click.option("--code", type=int, help="Only this Graph error code.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per dead message instead of a table.")
def dlq_list(limit: int, code: int | None, as_json: bool) -> None:
    """List dead messages, newest first, with their reasons."""
    from .. import queries
    rows = queries.list_dead(_engine(_settings()), limit=limit, code=code)
    if as_json:
        for r in rows:
            _echo_json(r)
        click.echo(f"({len(rows)} shown)", err=True)
        return
    # status: dead (given up here) or failed (Meta accepted it, then reported it failed: its code and title).
    click.echo(_tsv(["id", "status", "recipient", "attempts", "died_at", "reason"]))
    for r in rows:
        click.echo(_tsv([r.id, r.status, format_phone(r.recipient), r.attempts, f"{r.died_at:%Y-%m-%d %H:%M:%S}",
                         (r.last_error or {}).get("message", "")]))
    click.echo(f"({len(rows)} shown)", err=True)


@dlq.command("show")
@click.argument("notification_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="The message and its timeline as one JSON object.")
def dlq_show(notification_id: int, as_json: bool) -> None:
    """Show one message (dead or not) with its last error and whole timeline."""
    from .. import queries
    found = queries.get_notification(_engine(_settings()), id=notification_id)
    if not found:
        raise click.ClickException(f"no message {notification_id}")
    if as_json:
        _echo_json(found)
    else:
        _print_notification(found)


@dlq.command("retry")
@click.argument("ids", nargs=-1, type=int)
@click.option("--all", "all_dead", is_flag=True, help="Every dead or failed message (narrow with --code/--to).")
@click.option("--code", type=int, help="With --all: only this Graph error code.")
@click.option("--to", "recipient", help="With --all: only this recipient.")
def dlq_retry(ids, all_dead, code, recipient) -> None:
    """Requeue dead or failed messages: attempts start over; the timeline records it."""
    from .. import outbox
    from ..messages import normalize_recipient
    if bool(ids) == all_dead:
        raise click.UsageError("give message ids, or --all")
    if (code or recipient) and not all_dead:
        raise click.UsageError("--code and --to narrow --all")
    requeued = outbox.requeue(_engine(_settings()), ids=list(ids), all_dead=all_dead, code=code,
                              recipient=normalize_recipient(recipient) if recipient else None, actor="cli")
    click.echo(f"requeued {len(requeued)}")
    missing = sorted(set(ids) - set(requeued))
    if missing:
        raise click.ClickException(f"not dead or failed, or not found: {' '.join(map(str, missing))}")


@dlq.command("purge")
@click.argument("ids", nargs=-1, type=int)
@click.option("--all", "all_dead", is_flag=True, help="Every dead message.")
@click.option("--older-than-days", default=0, show_default=True, type=click.IntRange(0))
@click.option("--yes", is_flag=True, help="Do not ask.")
def dlq_purge(ids, all_dead, older_than_days, yes) -> None:
    """Delete dead messages and their timelines, explicitly."""
    from .. import outbox, queries
    if bool(ids) == all_dead:
        raise click.UsageError("give message ids, or --all")
    if all_dead and not yes:
        click.confirm("Delete every dead message" + (f" older than {older_than_days} days" if older_than_days
                                                     else "") + "?", abort=True)
    engine = _engine(_settings())
    dead_before = {i for i in set(ids) if (row := queries.get_notification(engine, id=i)) and row.status == "dead"}
    purged = outbox.purge_dead(engine, ids=list(ids), all_dead=all_dead, older_than_days=older_than_days)
    click.echo(f"purged {purged}")
    # As for retry: an id that was not purged (not found, not dead, or too recent) is an error (exit status 1).
    left = (set(ids) - dead_before) | {i for i in dead_before if queries.get_notification(engine, id=i)}
    if left:
        raise click.ClickException(f"not dead, too recent, or not found: {' '.join(map(str, sorted(left)))}")

