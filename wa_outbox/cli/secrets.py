"""`wa-outbox secrets`: WA_OUTBOX_SECRET_KEY, the key the secrets stored in Postgres are encrypted under."""

from __future__ import annotations

import click

from ._accounts import refusals
from ._common import _engine, _settings
from ._output import _echo_json

_JSON = click.option("--json", "as_json", is_flag=True, help="The result as one JSON object.")


@click.group()
def secrets() -> None:
    """The key (WA_OUTBOX_SECRET_KEY) for app secrets, sender tokens and endpoint secrets stored in Postgres."""


@secrets.command("generate-key")
@_JSON
def secrets_generate_key(as_json) -> None:
    """Print a new key for WA_OUTBOX_SECRET_KEY (a Fernet key); nothing is stored."""
    from ..secret_box import generate_key
    key = generate_key()
    if as_json:
        _echo_json({"key": key})
    else:
        click.echo(key)


@secrets.command("rotate-key")
@_JSON
def secrets_rotate_key(as_json) -> None:
    """Re-encrypt every stored secret under the first key of WA_OUTBOX_SECRET_KEY, in one transaction. Rotation:
    put the new key first (NEW,OLD) everywhere, run this, then drop the old key."""
    from .. import accounts
    with refusals():
        settings = _settings()
        done = accounts.rotate_key(_engine(settings), settings)
    if as_json:
        _echo_json(done)
    else:
        click.echo(f"re-encrypted under the first key: {done.app_secrets} app secret(s), {done.senders} sender "
                   f"token(s), {done.endpoints} endpoint secret(s)")
