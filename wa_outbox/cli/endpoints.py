"""`wa-outbox endpoints`: an app's receivers of pushed events (the operations are wa_outbox/endpoints.py's)."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from ._common import _engine, _settings
from ._errors import CliError, ConfigurationError
from ._output import _echo_json, _tsv


@click.group()
def endpoints() -> None:
    """Endpoints: URLs the workers push events to, signed as Standard Webhooks (https://www.standardwebhooks.com/)."""


def _run(operation, *args, **kwargs):
    """An operation whose refusals (bad URL, unknown type or id, no WA_OUTBOX_SECRET_KEY) are one line, exit 1."""
    from .. import endpoints as ops
    from ..config import ConfigError
    try:
        return operation(*args, **kwargs)
    except ops.EndpointError as exc:
        raise CliError(str(exc)) from None
    except ConfigError as exc:  # SecretKeyMissing: WA_OUTBOX_SECRET_KEY unset
        raise ConfigurationError(exc) from None


def endpoint_json(row) -> dict[str, Any]:
    from .. import endpoints as ops
    return ops.public(row)


def _print_endpoint(row) -> None:
    click.echo(f"endpoint {row.id}: {row.state}" + (f" ({row.disabled_reason} since {row.disabled_at:%Y-%m-%d %H:%M})"
                                                   if row.disabled_at else ""))
    click.echo(f"  url {row.url}")
    if row.description:
        click.echo(f"  description {row.description}")
    click.echo(f"  events {','.join(row.event_types) if row.event_types else '(every type)'}"
               f"{', ordered per conversation' if row.ordered else ''}")
    click.echo(f"  secret {row.secret_fingerprint}" + (f", the previous one signs too until "
                                                        f"{row.previous_secret_until:%Y-%m-%d %H:%M:%S %Z}"
                                                        if row.previous_secret_until else ""))
    click.echo(f"  deliveries pending {row.pending}, failed {row.failed}"
               + (f"; failing since {row.failing_since:%Y-%m-%d %H:%M:%S %Z}" if row.failing_since else ""))


@endpoints.command("add")
@click.argument("url")
@click.option("--events", "event_types", metavar="TYPE,…", help="Only these event types (default: every type).")
@click.option("--ordered", is_flag=True, help="Deliver each conversation's events one at a time, in order.")
@click.option("--description", help="A note for operators.")
@click.option("--json", "as_json", is_flag=True, help="The endpoint and its secret as one JSON object.")
def endpoints_add(url: str, event_types: str | None, ordered: bool, description: str | None, as_json: bool) -> None:
    """Register an endpoint and print its signing secret (shown this once: keep it in the receiver's settings)."""
    from .. import endpoints as ops
    settings = _settings()
    made = _run(ops.add, _engine(settings), settings, url=url, event_types=event_types, ordered=ordered,
                description=description)
    if as_json:
        _echo_json({**endpoint_json(made.endpoint), "secret": made.secret})
        return
    click.echo(f"endpoint {made.endpoint.id} added for {made.endpoint.url}")
    click.echo(f"secret {made.secret}")
    click.echo("(the secret is shown this once; the receiver verifies each delivery with it)", err=True)


@endpoints.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per endpoint instead of a table.")
def endpoints_list(as_json: bool) -> None:
    """Every endpoint with its state and its deliveries pending and failed."""
    from .. import endpoints as ops
    rows = ops.list_all(_engine(_settings()))
    if as_json:
        for row in rows:
            _echo_json(endpoint_json(row))
        return
    click.echo(_tsv(["id", "state", "url", "events", "ordered", "pending", "failed", "failing_since"]))
    for r in rows:
        click.echo(_tsv([r.id, r.state + (f" ({r.disabled_reason})" if r.disabled_reason else ""), r.url,
                         ",".join(r.event_types) if r.event_types else "*", "yes" if r.ordered else "no",
                         r.pending, r.failed, f"{r.failing_since:%Y-%m-%d %H:%M:%S}" if r.failing_since else ""]))
    click.echo(f"({len(rows)} endpoint(s))", err=True)


@endpoints.command("show")
@click.argument("endpoint_id")
@click.option("--json", "as_json", is_flag=True, help="The endpoint as one JSON object.")
def endpoints_show(endpoint_id: str, as_json: bool) -> None:
    """One endpoint: its URL, filter, state, secret's fingerprint and deliveries."""
    from .. import endpoints as ops
    row = _run(ops.show, _engine(_settings()), endpoint_id)
    if as_json:
        _echo_json(endpoint_json(row))
    else:
        _print_endpoint(row)


@endpoints.command("disable")
@click.argument("endpoint_id")
@click.option("--json", "as_json", is_flag=True, help="The new state as one JSON object.")
def endpoints_disable(endpoint_id: str, as_json: bool) -> None:
    """Stop delivering to an endpoint (its events wait until it is enabled)."""
    from .. import endpoints as ops
    result = _run(ops.disable, _engine(_settings()), endpoint_id)
    _echo_json(result) if as_json else click.echo(f"endpoint {result.id}: {result.previous_state} → {result.state}")


@endpoints.command("enable")
@click.argument("endpoint_id")
@click.option("--json", "as_json", is_flag=True, help="The new state as one JSON object.")
def endpoints_enable(endpoint_id: str, as_json: bool) -> None:
    """Deliver to an endpoint again; its failing state is cleared."""
    from .. import endpoints as ops
    result = _run(ops.enable, _engine(_settings()), endpoint_id)
    _echo_json(result) if as_json else click.echo(f"endpoint {result.id}: {result.previous_state} → {result.state}")


@endpoints.command("rotate-secret")
@click.argument("endpoint_id")
@click.option("--overlap", "overlap_hours", type=click.FloatRange(0, 24 * 30), default=24, show_default=True,
              help="Hours the old secret keeps signing beside the new one.")
@click.option("--json", "as_json", is_flag=True, help="The new secret and the overlap's end as one JSON object.")
def endpoints_rotate_secret(endpoint_id: str, overlap_hours: float, as_json: bool) -> None:
    """Make a new signing secret (printed this once); deliveries carry both signatures during the overlap."""
    from .. import endpoints as ops
    settings = _settings()
    result, secret = _run(ops.rotate_secret, _engine(settings), settings, endpoint_id, overlap_hours)
    if as_json:
        _echo_json({**dataclasses.asdict(result), "secret": secret})
        return
    click.echo(f"endpoint {result.id}: new secret {secret}")
    click.echo(f"the previous secret signs too until {result.previous_secret_until:%Y-%m-%d %H:%M:%S %Z}", err=True)


@endpoints.command("remove")
@click.argument("endpoint_id")
def endpoints_remove(endpoint_id: str) -> None:
    """Delete an endpoint with its deliveries and their attempts."""
    from .. import endpoints as ops
    _run(ops.remove, _engine(_settings()), endpoint_id)
    click.echo(f"endpoint {endpoint_id} removed")


@endpoints.command("deliveries")
@click.argument("endpoint_id")
@click.option("--failed", is_flag=True, help="Only deliveries whose retries ran out.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 500))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per delivery, with its attempts.")
def endpoints_deliveries(endpoint_id: str, failed: bool, limit: int, as_json: bool) -> None:
    """An endpoint's recent deliveries, newest event first, with their last answer."""
    from .. import endpoints as ops
    rows = _run(ops.deliveries, _engine(_settings()), endpoint_id, failed=failed, limit=limit)
    if as_json:
        for row in rows:
            _echo_json(row)
        return
    click.echo(_tsv(["delivery", "event", "type", "status", "attempts", "last_status", "latency_ms", "last_error"]))
    for r in rows:
        last = r.attempt_log[-1] if r.attempt_log else {}
        latency = last.get("latency_ms")
        click.echo(_tsv([r.id, r.event_id, r.event_type or "", r.status, r.attempts,
                         r.last_status_code if r.last_status_code is not None else "",
                         f"{latency:.0f}" if isinstance(latency, (int, float)) else "", r.last_error or ""]))
    click.echo(f"({len(rows)} shown)", err=True)


@endpoints.command("replay")
@click.argument("endpoint_id")
@click.option("--since", metavar="TIME", help="Every matching event since then: ISO 8601, or back from now (2h, 7d).")
@click.option("--failed-only", is_flag=True, help="Only deliveries whose retries ran out.")
@click.option("--json", "as_json", is_flag=True, help="The counts as one JSON object.")
def endpoints_replay(endpoint_id: str, since: str | None, failed_only: bool, as_json: bool) -> None:
    """Deliver events again: those since TIME (each once more, with its own id), or the failed ones."""
    from .. import endpoints as ops
    result = _run(ops.replay, _engine(_settings()), endpoint_id, since=since, failed_only=failed_only)
    if as_json:
        _echo_json({"id": endpoint_id, "requeued": result.requeued, "inserted": result.inserted})
    else:
        click.echo(f"endpoint {endpoint_id}: {result.requeued + result.inserted} deliveries queued "
                   f"({result.requeued} again, {result.inserted} new)")
