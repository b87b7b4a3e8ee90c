"""`wa-outbox ratelimit`: per-sender rates."""

from __future__ import annotations

import click

from ._common import _engine, _settings
from ._output import _echo_json, _tsv


@click.group()
def ratelimit() -> None:
    """Per-sender rates, shared by every worker."""


@ratelimit.command("show")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per sender instead of a table.")
def ratelimit_show(as_json: bool) -> None:
    """Every sender's rate, burst, tokens and pause."""
    from .. import queries
    rows = queries.ratelimit_show(_engine(_settings()))
    if as_json:
        for r in rows:
            _echo_json(r)
        return
    # burst "default": the default pacing (never more than mps in any one-second window); refill and capacity are
    # the bucket that makes.
    click.echo(_tsv(["phone_number_id", "mps", "burst", "refill", "capacity", "tokens", "paused_until",
                     "pause_reason"]))
    for r in rows:
        burst = "default" if r.burst is None else f"{r.burst:g}"
        click.echo(_tsv([r.phone_number_id, f"{r.mps:g}", burst, f"{r.refill:.4g}", f"{r.capacity:.4g}", r.tokens,
                         r.paused_until or "", r.pause_reason or ""]))


@ratelimit.command("set")
@click.argument("phone_number_id")
@click.option("--mps", type=click.FloatRange(min=0.01), required=True, help="Messages per second.")
@click.option("--burst", type=click.FloatRange(min=1),
              help="A classic token bucket of this size: a one-second window may then see up to burst + mps sends. "
                   "Default: paced so that no one-second window ever sees more than --mps.")
@click.option("--resume", is_flag=True, help="Also lift a pause now (see also: ratelimit resume).")
def ratelimit_set(phone_number_id, mps, burst, resume) -> None:
    """Set a sender's rate, shared by every worker."""
    from .. import queries
    _check_phone_number_id(phone_number_id)
    engine = _engine(_settings())
    if resume:  # as `ratelimit resume`: the messages the pause deferred are due now too
        queries.resume_sender(engine, phone_number_id=phone_number_id)
    r = queries.ratelimit_set(engine, phone_number_id=phone_number_id, mps=mps, burst=burst, resume=resume)
    click.echo(f"{r.phone_number_id}: {r.mps:g} messages/s, "
               + ("paced (never more than that in any second)" if r.burst is None else f"burst {r.burst:g}")
               + (f", paused until {r.paused_until}" if r.paused_until else ""))


def _check_phone_number_id(phone_number_id: str) -> None:
    from ..messages import InvalidMessage, validate_phone_number_id
    try:
        validate_phone_number_id(phone_number_id)
    except InvalidMessage as exc:
        raise click.BadParameter(str(exc), param_hint="PHONE_NUMBER_ID") from None


@ratelimit.command("resume")
@click.argument("phone_number_id")
def ratelimit_resume(phone_number_id) -> None:
    """Lift a sender's pause now; the messages the pause deferred are due at once."""
    from .. import queries
    _check_phone_number_id(phone_number_id)
    r = queries.resume_sender(_engine(_settings()), phone_number_id=phone_number_id)
    if r.was_paused_until is None:
        click.echo(f"{phone_number_id}: not paused; {r.moved} messages moved")
    else:
        click.echo(f"{phone_number_id}: resumed (was paused until {r.was_paused_until}: {r.pause_reason}); "
                   f"{r.moved} deferred messages due now")

