"""What `wa-outbox apps`, `senders` and `secrets` share: the secret's options (one of --…-env, --…-ref, --…-stdin,
read into accounts.Secret), accounts' refusals as one-line errors, and the rows printed without a secret."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from ._errors import CliError

if TYPE_CHECKING:
    from ..accounts import Secret


def secret_options(kind: str, required: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--{kind}-env VAR, --{kind}-ref VAR, --{kind}-stdin: exactly one (accounts.Secret reads and checks it)."""
    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        f = click.option(f"--{kind}-stdin", "from_stdin", is_flag=True,
                         help=f"Read the {kind} from stdin (one line) and store it encrypted.")(f)
        f = click.option(f"--{kind}-ref", "ref", metavar="VAR",
                         help=f"Store only the name of the environment variable holding the {kind}, read where it "
                              "is used (it must be set here too).")(f)
        f = click.option(f"--{kind}-env", "env", metavar="VAR",
                         help=f"Read the {kind} from this environment variable now and store it encrypted under "
                              "WA_OUTBOX_SECRET_KEY (it never appears on a command line).")(f)
        return f
    return decorate


def read_secret(kind: str, env: str | None, ref: str | None, from_stdin: bool) -> Secret:
    from ..accounts import Secret
    given = [name for name, value in ((f"--{kind}-env", env), (f"--{kind}-ref", ref),
                                      (f"--{kind}-stdin", from_stdin)) if value]
    if len(given) != 1:
        raise click.UsageError(f"give exactly one of --{kind}-env VAR, --{kind}-ref VAR, --{kind}-stdin")
    with refusals():
        if env:
            return Secret.from_env(env, f"the {kind}")
        if ref:
            return Secret.reference(ref, f"the {kind}")
        return Secret.given(sys.stdin.readline(), f"the {kind} on stdin")


@contextmanager
def refusals() -> Iterator[None]:
    """accounts' refusals (bad input: exit 2; not found, conflict: exit 1) and a missing WA_OUTBOX_SECRET_KEY
    (a configuration error, exit 2) as one line; nothing was changed."""
    from ..accounts import AccountError, InvalidAccount
    from ..config import ConfigError
    from ._errors import ConfigurationError
    try:
        yield
    except InvalidAccount as exc:
        raise CliError(str(exc), exit_code=2) from None
    except AccountError as exc:
        raise CliError(str(exc)) from None
    except ConfigError as exc:
        raise ConfigurationError(exc) from None


def cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, float):
        return f"{value:g}"
    return value
