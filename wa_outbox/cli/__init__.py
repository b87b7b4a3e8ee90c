"""The `wa-outbox` command line.

Every command reads the same environment as the services. Without DATABASE_URL the commands start (or reuse) the
embedded Postgres in ./.wa-outbox/ (WA_OUTBOX_DATA_DIR), so a laptop needs nothing installed.

This module is the `main` group (the console script `wa_outbox.cli:main`); each command group lives in its own
module and is registered here.
"""

from __future__ import annotations

import sys  # noqa: F401 - cli.sys, as before the split (tests patch cli.sys.stderr)

import click

from .. import (
    __version__,
    logs,  # noqa: F401 - cli.logs: tests silence cli.logs.configure
)
from . import (
    apps,
    campaigns,
    db,
    dlq,
    endpoints,
    events,
    messages,
    portfolios,  # the messaging limit (issue 20)
    processes,
    prune,
    ratelimit,
    secrets,
    senders,
)
from ._errors import CliError, _Main, describe_database_error
from ._help import full_short_help
from ._output import _tsv  # noqa: F401 - the names wa_outbox.cli had before it became a package
from .media import media as media_group  # `wa-outbox media` (inbound media)
from .prune import _PruneProgress  # noqa: F401

__all__ = ["main", "CliError", "describe_database_error"]


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="wa-outbox", message="%(prog)s %(version)s")
def main() -> None:
    """wa-outbox: reliable WhatsApp Cloud API messaging with Postgres as the only moving part."""


for _command in (db.db, processes.web, processes.worker, processes.dev, processes.simulator, messages.send,
                 messages.status, messages.cancel, dlq.dlq, ratelimit.ratelimit, prune.prune, campaigns.campaign,
                 events.events, endpoints.endpoints, apps.apps, senders.senders, secrets.secrets,
                 media_group):
    main.add_command(_command)
# --- templates (issue 20) ---
from .templates import templates as _templates  # noqa: E402 - in a block of its own, so merges stay mechanical

main.add_command(_templates)

main.add_command(portfolios.portfolios)

# == The first hour (issue 23): every command's whole first sentence in `--help`, never cut with "..." ==
full_short_help(main)
