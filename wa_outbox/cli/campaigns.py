"""`wa-outbox campaign`: campaigns imported from CSV and steered as one."""

from __future__ import annotations

import json as _json
import sys
import time
from typing import TYPE_CHECKING

import click

from ._common import _engine, _settings
from ._errors import CliError
from ._output import _json_default, _tsv

if TYPE_CHECKING:
    from ..queries import CampaignSteered


@click.group()
def campaign() -> None:
    """Campaigns: named sets of messages imported from CSV and steered as one."""


class _Progress:
    """Import progress on stderr: a bar redrawn in place on a terminal, a plain line per tenth otherwise."""

    def __init__(self, total: int):
        self.total, self.done, self.started = total, 0, time.monotonic()
        self.tty = sys.stderr.isatty()
        self._next_line = 0

    def __call__(self, rows: int) -> None:
        self.done += rows
        rate = self.done / max(time.monotonic() - self.started, 1e-6)
        if self.tty:
            width = 30
            filled = int(width * self.done / max(self.total, 1))
            click.echo(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done:,}/{self.total:,} rows  "
                       f"{rate:,.0f} rows/s", err=True, nl=self.done >= self.total)
        elif self.done >= self._next_line or self.done >= self.total:
            click.echo(f"imported {self.done:,}/{self.total:,} rows ({rate:,.0f} rows/s)", err=True)
            self._next_line = self.done + max(1, self.total // 10)


def _campaign_error(exc) -> CliError:
    return CliError(str(exc))


@campaign.command("import")
@click.argument("csv_file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--name", required=True, help="The campaign (created on first import, found by name after).")
@click.option("--template", help="Template name (unless the CSV has a `message` column).")
@click.option("--lang", help="Template language code, e.g. en_US.")
@click.option("--phone-number-id", help="Sender: a phone number id or a registered sender's alias (default: the "
                                         "campaign's, else WHATSAPP_PHONE_NUMBER_ID, else the only registered sender).")
@click.option("--skip-invalid", is_flag=True, help="Import the valid rows and list the others (default: write "
                                                   "nothing if any row is invalid).")
@click.option("--dry-run", is_flag=True, help="Validate and say what the import would do (how many recipients "
                                              "count against the portfolio's messaging limit, how many it has "
                                              "left, when the campaign would finish at it); write nothing.")
def campaign_import(csv_file, name, template, lang, phone_number_id, skip_invalid, dry_run=False) -> None:
    """Queue one message per CSV row (columns: to, body.1 … or body.<name>, header.1, header.image, or message).

    Every row is validated first; with an invalid row nothing is written (exit 1) unless --skip-invalid. Importing
    the same file again queues nothing new."""
    from .. import campaigns
    from ..messages import InvalidMessage, validate_sender
    try:
        campaigns.validate_name(name)
        validate_sender(phone_number_id)
    except (campaigns.CampaignError, InvalidMessage) as exc:
        raise click.BadParameter(str(exc)) from None
    if (template is None) != (lang is None):
        raise click.UsageError("--template and --lang go together")
    with click.open_file(csv_file, "rb") as handle:
        data = handle.read()
    try:
        read = campaigns.read_csv(campaigns.read_lines(data), name=name, template=template, lang=lang)
    except campaigns.InvalidCsv as exc:
        raise CliError(f"{csv_file}: {exc}") from None
    for problem in read.problems:
        click.echo(f"{csv_file}:{problem.line}: {problem.reason}", err=True)
    if read.problems and not skip_invalid:
        raise CliError(f"{len(read.problems)} invalid row(s) of {read.rows}: nothing imported "
                       "(fix them, or --skip-invalid to import the others)")
    settings = _settings()
    sender = phone_number_id or None
    if dry_run:
        _dry_run(settings, name, sender, read)
        return
    progress = _Progress(len(read.items))
    started = time.monotonic()
    try:
        result = campaigns.import_items(_engine(settings), name=name, phone_number_id=sender, items=read.items,
                                        default_sender=settings.phone_number_id, progress=progress)
    except campaigns.CampaignError as exc:
        raise _campaign_error(exc) from None
    elapsed = time.monotonic() - started
    parked = " (the campaign is paused: they wait for `campaign resume`)" if result.status == "paused" else ""
    click.echo(f"campaign {name}: {result.imported} imported, {result.present + read.duplicates} already present, "
               f"{len(read.problems)} invalid{parked}")
    if read.items:
        click.echo(f"({len(read.items):,} rows written in {elapsed:.1f} s, "
                   f"{len(read.items) / max(elapsed, 1e-6):,.0f} rows/s)", err=True)


def _dry_run(settings, name: str, sender: str | None, read) -> None:
    """What `campaign import --dry-run` says: the rows, and the campaign at its portfolio's messaging limit."""
    from .. import campaigns, portfolios
    from ..messaging_limit import is_template
    engine = _engine(settings)
    existing = next((c for c in campaigns.summaries(engine, name, default_mps=settings.rate_limit_mps)), None)
    sender = sender or (existing["phone_number_id"] if existing else None) or settings.phone_number_id
    recipients = sorted({item["to"] for item in map(_item, read.items) if is_template(item.get("message"))})
    figures = portfolios.campaign_figures(engine, sender=sender, recipients=recipients)
    click.echo(f"campaign {name} (dry run, nothing written): {len(read.items)} valid row(s), "
               f"{len(read.problems)} invalid, {read.duplicates} duplicate(s); sender {sender or '-'}")
    click.echo(f"  {portfolios.figures_text(figures)}")


def _item(item) -> dict:
    return _json.loads(item) if isinstance(item, str) else item


def _print_campaign(c: dict) -> None:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(c["counts"].items())) or "no messages"
    click.echo(f"campaign {c['name']}: {c['status']}" + (f" ({c['pause_reason']})" if c["pause_reason"] else ""))
    click.echo(f"  sender {c['phone_number_id']}, {c['total']} messages: {counts}")
    achieved = c["sent_per_second_last_minute"]
    click.echo(f"  rate: the sender's {c['rate_mps']:g} messages/s (shared; transactional messages first)"
               + (f", {achieved:g}/s sent over the last minute" if achieved else ""))
    click.echo(f"  created {c['created_at']:%Y-%m-%d %H:%M:%S}, started sending "
               + (f"{c['started_at']:%Y-%m-%d %H:%M:%S}" if c["started_at"] else "-"))
    if c["expected_end_at"]:
        click.echo(f"  expected end {c['expected_end_at']:%Y-%m-%d %H:%M:%S} UTC at the earliest "
                   f"({c['waiting']} waiting)")
    elif c["status"] == "paused":
        click.echo(f"  {c['waiting']} waiting for `wa-outbox campaign resume {c['name']}`")
    if c.get("messaging_limit"):
        from ..portfolios import figures_text
        click.echo(f"  {figures_text(c['messaging_limit'])}")


@campaign.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per campaign.")
def campaign_list(as_json: bool) -> None:
    """Every campaign with its messages counted by status."""
    from .. import campaigns
    settings = _settings()
    rows = campaigns.summaries(_engine(settings), default_mps=settings.rate_limit_mps)
    if as_json:
        for row in rows:
            click.echo(_json.dumps(row, default=_json_default, ensure_ascii=False))
        return
    statuses = ("queued", "sent", "delivered", "read", "failed", "dead", "cancelled")
    click.echo(_tsv(["name", "status", "sender", "total", *statuses]))
    for r in rows:
        click.echo(_tsv([r["name"], r["status"], r["phone_number_id"], r["total"],
                         *(r["counts"].get(s, 0) for s in statuses)]))


@campaign.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="As one JSON object.")
def campaign_show(name: str, as_json: bool) -> None:
    """A campaign: counts by status, the rate, when it started and when it should end."""
    from .. import campaigns
    settings = _settings()
    try:
        found = campaigns.get(_engine(settings), name, default_mps=settings.rate_limit_mps)
    except campaigns.CampaignError as exc:
        raise _campaign_error(exc) from None
    if as_json:
        click.echo(_json.dumps(found, default=_json_default, ensure_ascii=False))
    else:
        _print_campaign(found)


def _steer(name: str, action: str, reason: str | None = None) -> CampaignSteered:
    from .. import campaigns
    try:
        return campaigns.steer(_engine(_settings()), name, action, actor="cli", reason=reason)
    except campaigns.CampaignError as exc:
        raise _campaign_error(exc) from None


@campaign.command("pause")
@click.argument("name")
@click.option("--reason", help="Shown with the campaign (default: paused by cli).")
def campaign_pause(name: str, reason: str | None) -> None:
    """Stop claiming the campaign's messages now; in-flight sends finish, retries wait. Nothing is lost."""
    r = _steer(name, "pause", reason=reason)
    click.echo(f"campaign {name}: paused, {r.moved} messages parked")


@campaign.command("resume")
@click.argument("name")
def campaign_resume(name: str) -> None:
    """Let the campaign's messages go again, attempts as they were."""
    r = _steer(name, "resume")
    click.echo(f"campaign {name}: active, {r.moved} messages due again")


@campaign.command("cancel")
@click.argument("name")
def campaign_cancel(name: str) -> None:
    """Cancel every still-queued message of the campaign (each gets a timeline event); no more imports into it."""
    r = _steer(name, "cancel")
    click.echo(f"campaign {name}: cancelled, {r.moved} queued messages cancelled")

