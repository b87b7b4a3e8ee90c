"""The SQL console (`wa-outbox db query`, `db support-role`: cli/db_console.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from .. import db
from ._run import _conn_one

# --- the SQL console (`wa-outbox db query`, `db support-role`: cli/db_console.py) -------------------------------------
# Each runs on the console's own connection, inside the transaction it holds (the read-only one of `db query`), never
# on a pooled connection of its own.

def console_begin(conn: psycopg.Connection[Any], *, statement_timeout: str, lock_timeout: str,
                  role: str | None) -> None:
    """First in `db query`'s READ ONLY transaction: its statement and lock timeouts (`'30000ms'`) and the role to run
    as (None: the connection's), for this transaction only."""
    with conn.cursor() as cursor:
        cursor.execute(db.query("console_begin"),
                       {"statement_timeout": statement_timeout, "lock_timeout": lock_timeout, "role": role})


@dataclass(frozen=True, slots=True)
class VolatileCall:
    kind: str    # function or operator
    schema: str
    name: str


def console_volatile_calls(conn: psycopg.Connection[Any], *, function_schemas: list[str], function_names: list[str],
                           operator_schemas: list[str], operator_names: list[str]) -> list[VolatileCall]:
    """The VOLATILE functions (and operators' functions) among the names a statement uses, each name given as its
    schema ('' unqualified) and name, in two parallel lists per kind."""
    with conn.cursor(row_factory=class_row(VolatileCall)) as cursor:
        return cursor.execute(db.query("console_volatile_calls"), {
            "function_schemas": function_schemas, "function_names": function_names,
            "operator_schemas": operator_schemas, "operator_names": operator_names}).fetchall()


@dataclass(frozen=True, slots=True)
class SupportRoleState:
    exists: bool
    privileged: bool         # a superuser, or may create roles or databases, replicate or bypass row security
    is_me: bool              # the role running this (current or session user)
    i_am_superuser: bool
    i_am_member: bool | None  # None: the role does not exist
    views: list[str]         # every view of schema wa_outbox, by name


def support_role_state(conn: psycopg.Connection[Any], *, name: str) -> SupportRoleState:
    return _conn_one(conn, "support_role_state", SupportRoleState, {"name": name})
