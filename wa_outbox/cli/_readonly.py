"""What `wa-outbox db query` runs without `--write`: exactly one statement that reads, decided before anything runs.

A READ ONLY transaction alone is not enough: Postgres still runs, inside one, functions that change large objects
(lo_from_bytea, lo_unlink), signal or reconfigure the server (pg_terminate_backend, pg_reload_conf), take locks
(LOCK TABLE, FOR UPDATE, pg_advisory_lock) or change the session (set_config), and COPY … TO PROGRAM. So the
statement is parsed with Postgres's own parser (pglast: libpg_query) and allowed only when it is a SELECT, VALUES,
TABLE, SHOW, or EXPLAIN without ANALYZE of one of those, with no locking clause, no SELECT INTO and no data-modifying
WITH. Every function and operator it names is then looked up in pg_proc (`volatile_refusal`): a function that can
change anything must be VOLATILE in Postgres (a STABLE or IMMUTABLE one is run with a snapshot that cannot write), so
a volatile one is refused unless it is one of the few harmless pg_catalog functions of READ_ONLY_VOLATILE.

The parts here are pure (no database): `inspect` decides on the text, `volatile_refusal` on what pg_proc answered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# pg_catalog functions that are VOLATILE only because their answer changes from call to call (a clock, a random
# number, a size or a status read now), and that change nothing.
READ_ONLY_VOLATILE = frozenset({
    "random", "random_normal", "clock_timestamp", "timeofday", "gen_random_uuid",
    "pg_relation_size", "pg_total_relation_size", "pg_table_size", "pg_indexes_size", "pg_database_size",
    "pg_tablespace_size", "pg_blocking_pids", "pg_safe_snapshot_blocking_pids", "pg_is_in_recovery",
    "pg_last_xact_replay_timestamp", "pg_current_wal_lsn", "pg_last_wal_receive_lsn", "pg_last_wal_replay_lsn",
    "pg_lock_status", "pg_partition_tree", "pg_partition_ancestors", "pg_notification_queue_usage",
    "pg_xact_commit_timestamp", "pg_jit_available",
})

ALLOWED = "one SELECT, VALUES, TABLE, SHOW or EXPLAIN without ANALYZE"

# Statement kinds by parse node, for the refusal message (any other node: its name without "Stmt").
_KINDS = {"InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE", "MergeStmt": "MERGE",
          "CopyStmt": "COPY", "LockStmt": "LOCK", "VariableSetStmt": "SET", "TransactionStmt": "a transaction command",
          "CreateTableAsStmt": "CREATE TABLE AS", "DoStmt": "DO", "CallStmt": "CALL", "ExecuteStmt": "EXECUTE",
          "PrepareStmt": "PREPARE", "DeclareCursorStmt": "DECLARE", "NotifyStmt": "NOTIFY", "ListenStmt": "LISTEN",
          "VacuumStmt": "VACUUM", "TruncateStmt": "TRUNCATE"}
_WRITES = ("InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt")
_OFF = {"off", "false", "no", "0"}


class Refused(Exception):
    """The statement is not run; the message (one line) says why."""


class SeveralStatements(Refused):
    pass


@dataclass(frozen=True)
class Inspected:
    """A statement allowed on its form; `functions` and `operators` it names, each (schema or "", name), still to
    be checked against pg_proc (`volatile_refusal`)."""
    functions: frozenset[tuple[str, str]]
    operators: frozenset[tuple[str, str]]


def _kind(node: object) -> str:
    name = type(node).__name__
    return _KINDS.get(name) or name.removesuffix("Stmt").upper()


def _is_on(option) -> bool:
    """An EXPLAIN option's value: on unless written as off/false/no/0."""
    from pglast import ast
    arg = option.arg
    if arg is None:
        return True
    if isinstance(arg, ast.String):
        return (arg.sval or "").lower() not in _OFF
    if isinstance(arg, ast.Integer):
        return arg.ival != 0
    if isinstance(arg, ast.Boolean):
        return bool(arg.boolval)
    return True


def _qualified(names) -> tuple[str, str]:
    parts = [n.sval for n in names]
    return (parts[-2] if len(parts) > 1 else "", parts[-1])


def inspect(sql: str) -> Inspected:
    """Parse `sql` and allow it only as described in the module's docstring; raise Refused (one line) otherwise."""
    from pglast import ast, parse_sql
    from pglast.parser import ParseError
    from pglast.visitors import Visitor
    try:
        statements = parse_sql(sql)
    except ParseError as exc:
        raise Refused(f"not valid SQL: {exc}") from None
    if not statements:
        raise Refused("no statement given")
    if len(statements) > 1:
        raise SeveralStatements("db query runs exactly one statement; this SQL has several: run them one by one")
    top = statements[0].stmt
    inner = top.query if isinstance(top, ast.ExplainStmt) else top
    if isinstance(top, ast.ExplainStmt):
        if any(o.defname == "analyze" and _is_on(o) for o in top.options or ()):
            raise Refused("EXPLAIN ANALYZE runs the statement; " + _read_only_only())
    if not isinstance(inner, (ast.SelectStmt, ast.VariableShowStmt)):
        raise Refused(f"{_kind(inner)} is not read-only; " + _read_only_only())
    functions: set[tuple[str, str]] = set()
    operators: set[tuple[str, str]] = set()
    problems: list[str] = []

    class Walk(Visitor):
        def visit(self, ancestors, node):
            name = type(node).__name__
            if name in _WRITES:
                problems.append(f"WITH … {_kind(node)} changes data")
            elif isinstance(node, ast.SelectStmt):
                if node.lockingClause:
                    problems.append("FOR UPDATE / FOR SHARE locks rows")
                if node.intoClause:
                    problems.append("SELECT INTO creates a table")
            elif isinstance(node, ast.FuncCall):
                functions.add(_qualified(node.funcname))
            elif isinstance(node, ast.A_Expr) and node.name:
                operators.add(_qualified(node.name))
            elif name.endswith("Stmt") and name not in ("SelectStmt", "RawStmt", "ExplainStmt", "VariableShowStmt"):
                problems.append(f"{_kind(node)} is not read-only")

    Walk()(statements)
    if problems:
        raise Refused(f"{problems[0]}; " + _read_only_only())
    return Inspected(frozenset(functions), frozenset(operators))


def _read_only_only() -> str:
    return f"db query runs {ALLOWED} in a read-only transaction unless --write"


def volatile_refusal(volatile: Iterable[tuple[str, str, str]]) -> str | None:
    """Why the statement is refused, or None: `volatile` is what pg_proc answered for the statement's names, each
    (kind: function|operator, schema, name) of a VOLATILE function (console_volatile_calls.sql)."""
    for kind, schema, name in sorted(volatile):
        if kind == "function" and schema == "pg_catalog" and name in READ_ONLY_VOLATILE:
            continue
        what = f"{schema}.{name}()" if kind == "function" else f"operator {schema}.{name}"
        return f"{what} is VOLATILE (it may change the database or the server); " + _read_only_only()
    return None
