"""What every query function shares: running a named query (db.fetch / db.execute, or a cursor of the caller's
connection) with its rows built as a dataclass by psycopg's `class_row`."""


from __future__ import annotations

from typing import Any, TypeVar

import psycopg
import sqlalchemy as sa
from psycopg.rows import class_row

from .. import db

T = TypeVar("T")

WORKER_ALIVE_SECONDS = 30  # as wa_outbox_workers_alive counts them (queue_metrics.sql)


def _rows(engine: sa.Engine, name: str, cls: type[T], params: dict[str, Any] | None = None) -> list[T]:
    return db.fetch(engine, name, params, row_factory=class_row(cls))


def _one(engine: sa.Engine, name: str, cls: type[T], params: dict[str, Any] | None = None) -> T:
    """The single row a query always returns (an aggregate, a function call)."""
    return _rows(engine, name, cls, params)[0]


def _ids(engine: sa.Engine, name: str, params: dict[str, Any]) -> list[int]:
    return [r["id"] for r in db.fetch(engine, name, params)]


def _conn_rows(conn: psycopg.Connection[Any], name: str, cls: type[T], params: dict[str, Any] | None = None
               ) -> list[T]:
    with db.execute_named(conn, name, params, row_factory=class_row(cls)) as cursor:
        return cursor.fetchall()


def _conn_one(conn: psycopg.Connection[Any], name: str, cls: type[T], params: dict[str, Any]) -> T:
    with db.execute_named(conn, name, params, row_factory=class_row(cls)) as cursor:
        found = cursor.fetchone()
    assert found is not None  # these queries always return one row
    return found


