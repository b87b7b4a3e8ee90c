"""One message at a time: `wa-outbox send`, `status` and `cancel`."""

from __future__ import annotations

import click

from ..messages import format_phone
from ._common import _engine, _settings
from ._output import _echo_json, _print_notification, _tsv


@click.command()
@click.option("--to", "to", required=True, help="Recipient, E.164 (+5511987654321).")
@click.option("--text", help="Text body.")
@click.option("--template", help="Template name (with --lang).")
@click.option("--lang", default="en_US", show_default=True, help="Template language code.")
@click.option("--json", "message_json", help="Any Cloud API message body, as JSON.")
@click.option("--idempotency-key", help="Same key, same message: queued once.")
@click.option("--correlation-id", help="Stored on the message and its timeline.")
@click.option("--phone-number-id", help="Sender: a phone number id or a registered sender's alias (default: "
                                         "WHATSAPP_PHONE_NUMBER_ID, else the only registered sender).")
@click.option("--print-json", "print_json", is_flag=True,
              help='Print the result as one JSON object ({"id", "status", "created"}) instead of the id alone.')
def send(to, text, template, lang, message_json, idempotency_key, correlation_id, phone_number_id,
         print_json) -> None:
    """Queue one message (the worker sends it) and print its id.

    The id alone on stdout (ID=$(wa-outbox send ...) in a script); an idempotency key seen before prints the id of
    the message it queued then, and says so on stderr. --print-json: the id, the status and whether it was created
    (--json is the message body)."""
    import json as _json

    import psycopg

    from .. import outbox
    from ..messages import InvalidMessage
    given = [x for x in (text, template, message_json) if x is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --text, --template or --json")
    if text is not None:
        message = {"type": "text", "text": {"body": text}}
    elif template is not None:
        message = {"type": "template", "template": {"name": template, "language": {"code": lang}}}
    else:
        try:
            message = _json.loads(message_json)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--json") from None
    settings = _settings()
    try:  # validated first (InvalidMessage), then one statement, safe to repeat (outbox.accept_message)
        accepted = outbox.accept_message(
            _engine(settings), to=to, message=message, idempotency_key=idempotency_key,
            correlation_id=correlation_id, phone_number_id=phone_number_id or settings.phone_number_id)
    except InvalidMessage as exc:
        raise click.ClickException(str(exc)) from None
    except psycopg.Error as exc:
        raise click.ClickException(str(exc).strip().splitlines()[0]) from None
    if print_json:
        _echo_json({"id": accepted.id, "status": accepted.status, "created": accepted.created})
    else:
        click.echo(accepted.id)
    if not accepted.created:
        click.echo(f"wa-outbox: idempotency key seen before: message {accepted.id} ({accepted.status}) is the one it "
                   "queued; nothing new was queued", err=True)


@click.command()
@click.argument("term")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message (with its timeline when found "
                                                      "by id) instead of text.")
def status(term: str, as_json: bool) -> None:
    """Was it sent? TERM is a message id, a phone number or a correlation id."""
    from .. import outbox, queries
    engine = _engine(_settings())
    shown = False
    found = queries.get_notification(engine, id=int(term)) if term.isdigit() and len(term) < 19 else None
    matches = [m for m in outbox.find_messages(engine, term) if not found or m.id != found.id]
    if as_json:
        for row in ([found] if found else []) + matches:
            _echo_json(row)
        if not found and not matches:
            raise click.ClickException(f"no message matches {term!r} (an id, a phone number or a correlation id)")
        return
    if found:
        _print_notification(found)
        shown = True
    if matches:
        if shown:
            click.echo("")
        click.echo(_tsv(["id", "status", "recipient", "attempts", "created_at", "correlation_id", "last_error"]))
        for m in matches:
            click.echo(_tsv([m.id, m.status, format_phone(m.recipient), m.attempts, f"{m.created_at:%Y-%m-%d %H:%M:%S}",
                             m.correlation_id or "", m.last_error or ""]))
        shown = True
    if not shown:
        raise click.ClickException(f"no message matches {term!r} (an id, a phone number or a correlation id)")


@click.command()
@click.argument("ids", nargs=-1, type=click.IntRange(1, 2 ** 63 - 1), required=True)
def cancel(ids) -> None:
    """Cancel queued messages (by id): they are never sent; the timeline says the CLI asked. Exits 1 if any id is
    unknown or not queued, naming its status (the others are cancelled all the same)."""
    from .. import outbox
    results = outbox.cancel(_engine(_settings()), list(ids), actor="cli")
    problems = []
    for notification_id in dict.fromkeys(ids):
        if notification_id not in results:
            problems.append(f"{notification_id}: no such message")
        elif results[notification_id][1]:
            click.echo(_tsv([notification_id, "cancelled"]))
        else:
            problems.append(f"{notification_id}: is {results[notification_id][0]}, only queued messages can be "
                            "cancelled")
    if problems:
        raise click.ClickException("not cancelled: " + "; ".join(problems))
