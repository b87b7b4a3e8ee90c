"""`wa-outbox media`: the media customers sent (and files apps handed over), by Meta's media id or wa-outbox's own."""

from __future__ import annotations

import json as _json
import os
import sys
from typing import Any

import click

from ._common import _engine, _settings
from ._errors import CliError


@click.group()
def media() -> None:
    """Media kept by wa-outbox: what is known of one, and its bytes."""


def _row(media_id: str):
    from .. import queries
    settings = _settings()
    engine = _engine(settings)
    if not 0 < len(media_id) <= 128 or not media_id.isprintable():
        raise CliError("not a media id: give Meta's media id (as the webhook carried it) or wa-outbox's own id")
    row = queries.get_media(engine, given=media_id)
    if row is None:
        raise CliError(f"no media has the id {media_id}")
    return settings, engine, row


@media.command("show")
@click.argument("media_id")
@click.option("--json", "as_json", is_flag=True, help="The media as one JSON object.")
def show(media_id: str, as_json: bool) -> None:
    """What is known of one media: its state (pending, stored, failed, expired, too_large), type, size, sha256, the
    message that carried it."""
    from ..media_read import describe
    _, _, row = _row(media_id)
    shown = describe(row)
    if as_json:
        click.echo(_json.dumps(shown, ensure_ascii=False))
        return
    width = max(len(k) for k in shown)
    for key, value in shown.items():
        if value is not None:
            text = _json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value
            click.echo(f"{key:<{width}}  {text}")


@media.command("get")
@click.argument("media_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True),
              help="Write the bytes to this file (default: standard output; `-` too).")
def get(media_id: str, output: str | None) -> None:
    """Write one stored media's bytes, streamed a chunk at a time."""
    from .. import db, media_read, media_store
    from ..media_policy import MediaState
    settings, engine, row = _row(media_id)
    if row.state != MediaState.STORED or row.size is None:
        raise CliError(f"media {media_id} is not stored: {media_read.shown_state(row)}")
    if output in (None, "-") and sys.stdout.isatty():
        raise CliError("refusing to write a file's bytes to a terminal: give -o FILE (or redirect)")
    try:
        store = media_store.store_named(settings, row.store or media_store.PostgresStore.name)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    to_stdout = output is None or output == "-"
    partial = None if to_stdout else f"{output}.part"  # renamed once whole
    written = 0
    conn = engine.raw_connection()
    try:
        out: Any = sys.stdout.buffer if partial is None else open(partial, "wb")
        try:
            for chunk in store.open(db.psycopg_connection(conn), row.id, row.store_key):
                out.write(chunk)
                written += len(chunk)
        finally:
            if partial is not None:
                out.close()
    except OSError as exc:
        raise CliError(f"cannot write {output}: {exc.strerror or exc}") from None
    finally:
        conn.close()
    if written != row.size:
        if partial:
            os.unlink(partial)
        raise CliError(f"read {written} of {row.size} bytes of media {media_id}: the store is missing some")
    if partial and output:
        os.replace(partial, output)
        click.echo(f"wrote {written} bytes ({row.mime_type or 'unknown type'}) to {output}", err=True)
