"""`wa-outbox prune`: retention, in small batches."""

from __future__ import annotations

import json as _json
import sys
import time

import click

from ._common import _engine, _settings
from ._errors import CliError


@click.command()
@click.option("--days", default=30, show_default=True, type=click.IntRange(1),
              help="Keep finished messages this long (webhook dedup keys: at least 8 days).")
@click.option("--dead-days", type=click.IntRange(1),
              help="Also delete dead messages and dead webhook events older than this (default: keep the "
                   "dead-letter queue; dead webhook events at least 8 days).")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1, 50_000),
              help="Rows per batch; each batch is its own short transaction.")
@click.option("--json", "as_json", is_flag=True, help="The summary as one JSON object.")
def prune(days: int, dead_days: int | None, batch_size: int, as_json: bool) -> None:
    """Delete finished messages (with their timelines), processed webhooks, the events feed's old events (with
    their deliveries: WA_OUTBOX_EVENT_RETENTION_DAYS, default 30) and media (rows and bytes:
    WA_OUTBOX_MEDIA_RETENTION_DAYS, default 30; an outbound file only once no message names it) past the retention,
    in small batches.

    Safe while workers run: only final states go, rows in use are skipped, each batch commits on its own. Stopped
    anywhere, the next run carries on. Run it daily from a scheduler."""
    from .. import outbox
    progress = _PruneProgress()
    result = outbox.PruneResult()
    settings = _settings()
    try:
        outbox.prune(_engine(settings), days=days, dead_days=dead_days, batch_size=batch_size,
                     progress=progress, result=result, event_days=settings.event_retention_days)
    except KeyboardInterrupt:
        progress.finish()
        _prune_summary(result, as_json, interrupted=True)
        raise CliError("interrupted: the batches done are committed; run prune again to carry on",
                       exit_code=130) from None
    from ..media_retention import prune_media  # media: WA_OUTBOX_MEDIA_RETENTION_DAYS
    result.media = prune_media(_engine(settings), settings, days=settings.media_retention_days,
                               batch_size=min(batch_size, 1000))
    progress.finish()
    _prune_summary(result, as_json, interrupted=False)


def _prune_summary(result, as_json: bool, *, interrupted: bool) -> None:
    if as_json:
        click.echo(_json.dumps({"messages": result.messages, "events": result.events,
                                "webhook_events": result.webhook_events, "feed_events": result.feed_events,
                                "deliveries": result.deliveries, "media": result.media,
                                "batches": result.batches,
                                "seconds": round(result.seconds, 3),
                                "longest_batch_ms": round(result.longest_batch_seconds * 1000, 1),
                                "complete": not interrupted}))
    else:
        click.echo(f"pruned {result.messages} messages ({result.events} timeline events) and "
                   f"{result.webhook_events} webhook events in {result.batches} batches, {result.seconds:.1f} s "
                   f"(longest batch {result.longest_batch_seconds * 1000:.0f} ms); {result.feed_events} feed events "
                   f"and {result.deliveries} deliveries past WA_OUTBOX_EVENT_RETENTION_DAYS; "
                   f"{result.media} media past WA_OUTBOX_MEDIA_RETENTION_DAYS")


class _PruneProgress:
    """Prune progress on stderr: one line redrawn in place on a terminal, a plain line every 10 s otherwise (a
    scheduler's log)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.drawn = False
        self.next_at = time.monotonic() + (0.1 if self.tty else 10.0)

    def __call__(self, result) -> None:
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + (0.1 if self.tty else 10.0)
        line = (f"{result.phase.replace('_', ' ')} {result.fraction:4.0%}  {result.messages:,} messages, "
                f"{result.events:,} events, {result.webhook_events:,} webhook events  "
                f"{result.rows / max(result.seconds, 1e-6):,.0f} rows/s")
        if self.tty:
            click.echo(f"\r{line}\033[K", err=True, nl=False)
            self.drawn = True
        else:
            click.echo(f"prune: {line}", err=True)

    def finish(self) -> None:
        if self.drawn:
            click.echo("", err=True)

