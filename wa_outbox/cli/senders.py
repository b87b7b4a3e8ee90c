"""`wa-outbox senders`: the business numbers that send, their business accounts and tokens (accounts.py)."""

from __future__ import annotations

import dataclasses

import click

from ._accounts import cell, read_secret, refusals, secret_options
from ._common import _engine, _settings
from ._output import _echo_json, _tsv

_JSON = click.option("--json", "as_json", is_flag=True, help="The result as JSON (one object per sender).")
_COLUMNS = ["phone_number_id", "alias", "source", "waba_id", "app_id", "portfolio_id", "display_phone_number",
            "token", "token_fingerprint", "mps", "burst", "paused_until", "pause_reason",
            # number health (issue 20): as Meta last reported it
            "quality_rating", "flagged", "restricted", "restricted_until", "ban_state", "messaging_limit_tier",
            "throughput_level", "follow_meta_throughput", "health_changed_at"]


@click.group()
def senders() -> None:
    """Sender numbers: each with its business account (WABA), app, token and pacing."""


def _cells(r) -> list:
    return [r.phone_number_id, cell(r.alias), "environment" if r.from_environment else "registered", cell(r.waba_id),
            cell(r.app_id), cell(r.portfolio_id), cell(r.display_phone_number), cell(r.token_source) or "none",
            cell(r.token_fingerprint), "default" if r.mps is None else cell(r.mps),
            "default" if r.burst is None else cell(r.burst), cell(r.paused_until), cell(r.pause_reason),
            cell(r.quality_rating), cell(r.flagged), cell(r.restricted), cell(r.restricted_until), cell(r.ban_state),
            cell(r.messaging_limit_tier), cell(r.throughput_level), cell(r.follow_meta_throughput),
            cell(r.health_changed_at)]


def _show(row, as_json: bool, **extra) -> None:
    if as_json:
        _echo_json({**dataclasses.asdict(row), **extra})
        return
    for name, value in zip(_COLUMNS, _cells(row), strict=True):
        click.echo(f"{name}: {value}")


@senders.command("add")
@click.argument("phone_number_id")
@click.option("--waba", "waba_id", required=True, metavar="WABA_ID", help="Its WhatsApp Business Account.")
@click.option("--app", "app_id", required=True, metavar="APP_ID",
              help="The app the WABA belongs to (registered with `apps add`).")
@secret_options("token")
@click.option("--portfolio", "portfolio_id", metavar="ID", help="The business portfolio that owns the WABA.")
@click.option("--mps", type=float, help="Its pacing in messages per second (as `ratelimit set --mps`).")
@click.option("--alias", help="A name messages may give instead of the phone number id.")
@click.option("--display-phone-number", metavar="N", help="The number as people see it.")
@click.option("--follow-meta-throughput/--no-follow-meta-throughput", "follow", default=None,
              help="Whether its pacing follows the throughput Meta grants it (default: as it was; new: off).")
@_JSON
def senders_add(phone_number_id, waba_id, app_id, env, ref, from_stdin, portfolio_id, mps, alias,
                display_phone_number, follow, as_json) -> None:
    """Register a sender with its access token, or update it (options not given keep their values)."""
    from .. import accounts
    token = read_secret("token", env, ref, from_stdin)
    with refusals():
        settings = _settings()
        row, created = accounts.add_sender(
            _engine(settings), settings, phone_number_id=phone_number_id, waba_id=waba_id, app_id=app_id,
            token=token, portfolio_id=portfolio_id, mps=mps, alias=alias, display_phone_number=display_phone_number,
            follow_meta_throughput=follow)
    if not as_json:
        click.echo(f"sender {phone_number_id}: " + ("registered" if created else "updated"))
    _show(row, as_json, created=created)


@senders.command("set-token")
@click.argument("phone_number_id")
@secret_options("token")
@_JSON
def senders_set_token(phone_number_id, env, ref, from_stdin, as_json) -> None:
    """Replace a sender's access token: the next send uses it."""
    from .. import accounts
    token = read_secret("token", env, ref, from_stdin)
    with refusals():
        settings = _settings()
        row = accounts.set_token(_engine(settings), settings, phone_number_id=phone_number_id, token=token)
    if not as_json:
        click.echo(f"sender {phone_number_id}: token replaced")
    _show(row, as_json)


@senders.command("list")
@_JSON
def senders_list(as_json) -> None:
    """Every registered sender and the environment's (WHATSAPP_PHONE_NUMBER_ID), with token source, pacing, pause."""
    from .. import accounts
    settings = _settings()
    rows = accounts.senders(_engine(settings), settings)
    if as_json:
        for r in rows:
            _echo_json(r)
        return
    click.echo(_tsv(_COLUMNS))
    for r in rows:
        click.echo(_tsv(_cells(r)))


@senders.command("show")
@click.argument("phone_number_id")
@_JSON
def senders_show(phone_number_id, as_json) -> None:
    """One sender: business account, app, portfolio, token source and fingerprint, pacing and pause."""
    from .. import accounts
    with refusals():
        settings = _settings()
        row = accounts.sender(_engine(settings), settings, phone_number_id)
    _show(row, as_json)


@senders.command("remove")
@click.argument("phone_number_id")
@_JSON
def senders_remove(phone_number_id, as_json) -> None:
    """Remove a registered sender (its business account goes with its last sender; its pacing stays)."""
    from .. import accounts
    with refusals():
        waba_id = accounts.remove_sender(_engine(_settings()), phone_number_id=phone_number_id)
    if as_json:
        _echo_json({"phone_number_id": phone_number_id, "removed": True, "business_account_removed": waba_id})
    else:
        click.echo(f"sender {phone_number_id}: removed"
                   + (f" (and WABA {waba_id}, its last sender)" if waba_id else ""))


@senders.command("set")
@click.argument("phone_number_id")
@click.option("--follow-meta-throughput/--no-follow-meta-throughput", "follow", required=True,
              help="Its pacing follows the throughput Meta grants it (a THROUGHPUT_UPGRADE: 1,000/s), or only "
                   "what `ratelimit set` sets.")
@_JSON
def senders_set(phone_number_id, follow, as_json) -> None:
    """Change a registered sender's settings (no token needed): whether its pacing follows Meta's throughput."""
    from .. import accounts
    with refusals():
        settings = _settings()
        row = accounts.set_follow_meta(_engine(settings), settings, phone_number_id=phone_number_id, follow=follow)
    if not as_json:
        click.echo(f"sender {phone_number_id}: " + ("follows Meta's throughput" if follow else
                                                    "paced as `ratelimit set` sets, whatever Meta's throughput"))
    _show(row, as_json)
