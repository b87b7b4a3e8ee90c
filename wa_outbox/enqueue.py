"""`wa_outbox.enqueue(conn, …)`: put a message in the outbox inside the caller's own transaction.

Works with a SQLAlchemy Session or Connection, or a DB-API connection (psycopg 3, psycopg2). It writes the outbox
row and its `queued` timeline event through the SQL function wa_outbox.enqueue() (enqueue_many(): through
wa_outbox.enqueue_checked(), once its own checks passed) and nothing else: a rollback of the caller's transaction
leaves no trace, and its commit makes the message durable and wakes a worker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from .messages import Checked, InvalidMessage, check_request, validate_ordered

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session


class DBAPIConnection(Protocol):
    """A DB-API 2.0 connection (psycopg 3, psycopg2): all enqueue() asks of one is a cursor."""

    def cursor(self) -> Any: ...


# What enqueue() and enqueue_many() write through: the caller's own transaction.
Connectable: TypeAlias = "Connection | Session | DBAPIConnection"

_SQL_DBAPI = "SELECT wa_outbox.enqueue(%s, %s::jsonb, %s, %s, %s, %s)"
_SQL_SQLALCHEMY = ("SELECT wa_outbox.enqueue(:to_, CAST(:message AS jsonb), :idempotency_key, :correlation_id, "
                   ":phone_number_id, :ordered)")


def enqueue(conn: Connectable, *, to: str, message: dict[str, Any], idempotency_key: str | None = None,
            correlation_id: str | None = None, phone_number_id: str | None = None, ordered: bool = True) -> int:
    """Queue `message` (any Cloud API message body) for `to` (E.164); return the outbox id.

    A known `idempotency_key` returns the existing id; the same key with a different message raises the database's
    unique-violation error. Invalid input raises `InvalidMessage` before anything is sent to the database.
    `ordered=False` lets this message overtake (and be overtaken by) others to the same recipient."""
    checked = check_request(to=to, message=message, idempotency_key=idempotency_key,
                            correlation_id=correlation_id, phone_number_id=phone_number_id)
    # The normalized recipient: SQL strips the same separators, so the verdict cannot differ.
    params = (checked.recipient, json.dumps(message, separators=(",", ":")), checked.idempotency_key,
              checked.correlation_id, checked.phone_number_id, validate_ordered(ordered))

    import sqlalchemy as sa  # noqa: PLC0415 - `import wa_outbox` (an application's import) loads no SQLAlchemy
    from sqlalchemy.orm import Session  # noqa: PLC0415 - as above
    if isinstance(conn, Session):
        conn = conn.connection()
    if isinstance(conn, sa.engine.Connection):
        names = ("to_", "message", "idempotency_key", "correlation_id", "phone_number_id", "ordered")
        return conn.execute(sa.text(_SQL_SQLALCHEMY), dict(zip(names, params, strict=True))).scalar_one()
    cursor = conn.cursor()
    try:
        cursor.execute(_SQL_DBAPI, params)
        return cursor.fetchone()[0]
    finally:
        cursor.close()


def enqueue_many(conn: Connectable, items: Sequence[Mapping[str, Any]]) -> list[int]:
    """Queue many messages, set-based (campaigns, imports); return their ids in input order.

    Each item: {"to", "message", "idempotency_key"?, "correlation_id"?, "phone_number_id"?}. All or nothing:
    an invalid item raises `InvalidMessage` (naming its index) and nothing is queued. On psycopg 3, a batch of more
    than PIPELINE_ITEMS goes as several statements in one pipeline, inside a savepoint of the caller's transaction
    (or a transaction of its own in autocommit mode)."""
    if not items:
        return []
    import sqlalchemy as sa  # noqa: PLC0415 - `import wa_outbox` (an application's import) loads no SQLAlchemy
    from sqlalchemy.orm import Session  # noqa: PLC0415 - as above
    if isinstance(conn, Session):
        conn = conn.connection()
    driver = _pipelining_connection(conn)
    if driver is not None and len(items) > PIPELINE_ITEMS:
        return _enqueue_many_pipelined(driver, items)
    payload = batch_json(items)
    if isinstance(conn, sa.engine.Connection):
        return list(conn.execute(sa.text("SELECT wa_outbox.enqueue_checked(CAST(:items AS jsonb))"),
                                 {"items": payload}).scalar_one())
    cursor = conn.cursor()
    try:
        cursor.execute(_SQL_MANY, (payload,))
        return list(cursor.fetchone()[0])
    finally:
        cursor.close()


# A batch larger than this goes as statements of this many items in one pipeline (psycopg 3): Postgres inserts one
# part while this process checks and encodes the next, instead of each waiting for the other. One savepoint (or, in
# autocommit, one transaction) around them keeps the batch all or nothing.
PIPELINE_ITEMS = 1000
# The items are checked here (batch_json), by the rules the SQL functions apply, with the same verdicts
# (tests/db/test_validation.py): wa_outbox.enqueue_checked() writes them without checking each again, which was a third
# of Postgres's time per message. SQL callers use wa_outbox.enqueue_many(), which checks every item.
_SQL_MANY = "SELECT wa_outbox.enqueue_checked(%s::jsonb)"


def _pipelining_connection(conn: Any) -> Any:
    """The psycopg 3 connection under `conn` when it can run a pipeline, else None."""
    try:
        import psycopg  # noqa: PLC0415 - `import wa_outbox` loads no driver
    except ImportError:  # psycopg2 only
        return None
    import sqlalchemy as sa  # noqa: PLC0415 - `import wa_outbox` loads no SQLAlchemy
    if isinstance(conn, sa.engine.Connection):
        conn = conn.connection.driver_connection
    if not isinstance(conn, psycopg.Connection) or not psycopg.Pipeline.is_supported():
        return None
    return conn


def _enqueue_many_pipelined(conn: Any, items: Sequence[Mapping[str, Any]]) -> list[int]:
    import psycopg  # noqa: PLC0415 - `import wa_outbox` loads no driver
    if not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        # Open the caller's transaction as the single statement would have: transaction() below is then a
        # savepoint inside it, not a transaction of its own that commits.
        conn.execute("SELECT 1")
    cursors = []
    with conn.transaction(), conn.pipeline():  # an invalid item rolls back the parts already sent
        for start in range(0, len(items), PIPELINE_ITEMS):
            cursor = conn.cursor()
            cursor.execute(_SQL_MANY, (batch_json(items[start:start + PIPELINE_ITEMS], first_index=start),))
            cursors.append(cursor)
    ids = []
    for cursor in cursors:
        ids += cursor.fetchone()[0]
        cursor.close()
    return ids


def batch_json(items: Sequence[Mapping[str, Any]], first_index: int = 0) -> str:
    """enqueue_many()'s checks, and the JSON array it sends: InvalidMessage (naming the item's index, counted from
    `first_index`) for the first item that breaks a rule. The array is put together from each message's text as its
    check encoded it."""
    from . import meta_schema  # noqa: PLC0415 - `import wa_outbox` loads no configuration
    validate_mode = meta_schema.mode()  # read once for the batch, not per item
    parts = []
    for index, item in enumerate(items, first_index):
        try:
            if not isinstance(item, Mapping):
                raise InvalidMessage("must be an object")
            one = check_request(to=item.get("to"), message=item.get("message"),
                                idempotency_key=item.get("idempotency_key"),
                                correlation_id=item.get("correlation_id"), phone_number_id=item.get("phone_number_id"),
                                validate_mode=validate_mode)
        except InvalidMessage as exc:
            raise InvalidMessage(f"item {index}: {exc}") from None
        parts.append(_item_json(one))
    return "[" + ",".join(parts) + "]"


def _item_json(checked: Checked) -> str:
    """One item of wa_outbox.enqueue_checked()'s array. The recipient and sender are digits, the message is JSON text
    already; only the keys need encoding."""
    text = '{"to":"' + checked.recipient + '","message":' + checked.message_text
    if checked.idempotency_key is not None:
        text += ',"idempotency_key":' + json.dumps(checked.idempotency_key)
    if checked.correlation_id is not None:
        text += ',"correlation_id":' + json.dumps(checked.correlation_id)
    if checked.phone_number_id is not None:
        text += ',"phone_number_id":"' + checked.phone_number_id + '"'
    return text + "}"
