"""`wa-outbox apps`: the Meta apps whose secrets verify webhooks (accounts.py)."""

from __future__ import annotations

import dataclasses

import click

from ._accounts import cell, read_secret, refusals, secret_options
from ._common import _engine, _settings
from ._output import _echo_json, _tsv

_JSON = click.option("--json", "as_json", is_flag=True, help="The result as JSON (one object per app).")


@click.group()
def apps() -> None:
    """Meta apps: their secrets verify the webhooks Meta signs (several apps, each rotating on its own)."""


def _show(row, as_json: bool, **extra) -> None:
    if as_json:
        _echo_json({**dataclasses.asdict(row), **extra})
        return
    source = f"env:{row.secret_ref}" if row.secret_ref else "encrypted"
    click.echo(f"app {row.app_id}" + (f" ({row.name})" if row.name else ""))
    click.echo(f"  secret: {row.secret_fingerprint} ({source}, since {row.secret_updated_at})")
    if row.previous_fingerprint:
        click.echo(f"  previous secret: {row.previous_fingerprint}, verifies until {row.previous_expires_at}")
    click.echo(f"  business accounts: {', '.join(row.business_accounts) or '-'}; senders: {row.senders}")


@apps.command("add")
@click.argument("app_id")
@secret_options("secret")
@click.option("--name", help="A name for people (shown by list and show).")
@_JSON
def apps_add(app_id, env, ref, from_stdin, name, as_json) -> None:
    """Register a Meta app with its app secret (App settings > Basic in Meta's dashboard)."""
    from .. import accounts
    secret = read_secret("secret", env, ref, from_stdin)
    with refusals():
        settings = _settings()
        row, created = accounts.add_app(_engine(settings), settings, app_id=app_id, secret=secret, name=name)
    if not as_json:
        click.echo(f"app {app_id}: " + ("registered" if created else "already registered with that secret, unchanged"))
    _show(row, as_json, created=created)


@apps.command("rotate-secret")
@click.argument("app_id")
@secret_options("secret")
@click.option("--overlap", "overlap_hours", type=float, default=24.0, show_default=True, metavar="HOURS",
              help="How long the previous secret keeps verifying (0: it stops now).")
@_JSON
def apps_rotate_secret(app_id, env, ref, from_stdin, overlap_hours, as_json) -> None:
    """Make a new app secret current; the previous one verifies for --overlap hours (Meta signs with the new one
    from the moment it is reset in the dashboard)."""
    from .. import accounts
    secret = read_secret("secret", env, ref, from_stdin)
    with refusals():
        settings = _settings()
        row = accounts.rotate_app_secret(_engine(settings), settings, app_id=app_id, secret=secret,
                                         overlap_hours=overlap_hours)
    if not as_json:
        click.echo(f"app {app_id}: secret rotated")
    _show(row, as_json)


@apps.command("list")
@_JSON
def apps_list(as_json) -> None:
    """Every registered app: its secret's fingerprint and source, a previous secret still verifying, its WABAs."""
    from .. import accounts
    rows = accounts.apps(_engine(_settings()))
    if as_json:
        for r in rows:
            _echo_json(r)
        return
    click.echo(_tsv(["app_id", "name", "secret", "source", "previous_secret", "previous_until", "business_accounts",
                     "senders"]))
    for r in rows:
        click.echo(_tsv([r.app_id, cell(r.name), cell(r.secret_fingerprint),
                         f"env:{r.secret_ref}" if r.secret_ref else "encrypted", cell(r.previous_fingerprint),
                         cell(r.previous_expires_at), cell(r.business_accounts), r.senders]))


@apps.command("show")
@click.argument("app_id")
@_JSON
def apps_show(app_id, as_json) -> None:
    """One app: its secret's fingerprint and source, a previous secret still verifying, its WABAs and senders."""
    from .. import accounts
    with refusals():
        row = accounts.app(_engine(_settings()), app_id)
    _show(row, as_json)


@apps.command("remove")
@click.argument("app_id")
@_JSON
def apps_remove(app_id, as_json) -> None:
    """Remove an app and its secrets (refused while business accounts belong to it: remove their senders first)."""
    from .. import accounts
    with refusals():
        accounts.remove_app(_engine(_settings()), app_id=app_id)
    if as_json:
        _echo_json({"app_id": app_id, "removed": True})
    else:
        click.echo(f"app {app_id}: removed")
