"""Database access: the connection pool, the embedded Postgres for development, and the named SQL queries.

Every query the service runs lives in its own file under `wa_outbox/sql/` and is loaded here by name, so the SQL is
in one visible place and the Python around it stays thin. Queries use psycopg's `%(name)s` placeholders; the hot
paths (`fetch`, `execute`, `execute_named`) run them with PostgreSQL's own `$n` placeholders, converted once per
process (`named_query`), on a raw psycopg cursor (psycopg prepares repeated statements, unless
WA_OUTBOX_DB_PREPARED_STATEMENTS=false: `connect_options`). Every connection the service opens is made here:
`create_engine` (pools) and `connect` (one-off connections, the listener's).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import urllib.parse
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.rows import RowFactory, dict_row

from .config import ConfigError, Settings

log = logging.getLogger(__name__)

SCHEMA = "wa_outbox"


@functools.cache
def query(name: str) -> str:
    """The text of `wa_outbox/sql/<name>.sql`."""
    return resources.files("wa_outbox").joinpath("sql", f"{name}.sql").read_text()


_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")


@dataclass(frozen=True)
class NamedQuery:
    """A query file with PostgreSQL's `$n` placeholders in place of psycopg's `%(name)s` (`%%` becomes `%`), as
    psycopg would send it, and the parameters' names in `$n` order."""
    text: bytes
    names: tuple[str, ...]

    def args(self, params: Mapping[str, Any] | None) -> list[Any] | None:
        if not self.names:
            return None
        if params is None:
            raise psycopg.ProgrammingError(f"query parameters missing: {', '.join(self.names)}")
        try:
            return [params[name] for name in self.names]
        except KeyError as exc:
            raise psycopg.ProgrammingError(f"query parameter missing: {exc.args[0]}") from None


@functools.cache
def named_query(name: str) -> NamedQuery:
    """Query `name`, converted once. (psycopg converts `%(name)s` on every execute, and caches the conversion only
    for queries up to 4 KB: the claim, the status batch and the deliveries' statements are longer, and converting
    them was a tenth of a worker's Python CPU under load, bench/capacity.py with py-spy --gil, 2026-12-06.)"""
    numbers: dict[str, int] = {}  # each name's $n, in order of first use (a name used twice is one parameter)

    def number(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return "%"
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"
    return NamedQuery(_PLACEHOLDER.sub(number, query(name)).encode(), tuple(numbers))


def execute_named(conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any] | None = None, *,
                  row_factory: RowFactory[Any] = dict_row) -> psycopg.Cursor[Any]:
    """Run query `name` on `conn` (a raw cursor with `named_query`'s text); the cursor, to fetch from."""
    converted = named_query(name)
    cursor = psycopg.RawCursor(conn, row_factory=row_factory)
    return cursor.execute(converted.text, converted.args(params))


SAFE_TO_REPEAT = "-- Safe to repeat:"


@functools.cache
def safe_to_repeat(name: str) -> bool:
    """Whether query `name` may run again after its reply was lost: its header says so, and why, on a line starting
    with `-- Safe to repeat:`. A query without that line (a claim, an enqueue without idempotency key) is never
    repeated blindly: a lost reply to its COMMIT would otherwise strand or double its rows."""
    return any(line.startswith(SAFE_TO_REPEAT) for line in query(name).splitlines() if line.startswith("--"))


Row = dict[str, Any]


def fetch(engine: sa.Engine, name: str, params: dict[str, Any] | None = None, *,
          row_factory: RowFactory[Any] = dict_row) -> list[Any]:
    """Run named query `name` as one autocommit statement on a pooled raw psycopg connection; return its rows, each
    a dict by column name (or what `row_factory` makes of it: wa_outbox/queries/ passes class_row). `engine` must be
    an autocommit engine. The hot paths use this: one round trip, no ORM.

    If the database dropped the connection (restart, failover), the idle pool is emptied; the statement is tried once
    more on a new connection only when its SQL file declares it safe to repeat (`safe_to_repeat`)."""
    return _with_reconnect(engine, name, params, row_factory)[0]


def execute(engine: sa.Engine, name: str, params: dict[str, Any] | None = None) -> int:
    """Run named query `name` (as `fetch` does) for its effect; return the row count."""
    return _with_reconnect(engine, name, params, dict_row)[1]


def _with_reconnect(engine: sa.Engine, name: str, params: dict[str, Any] | None,
                    row_factory: RowFactory[Any]) -> tuple[list[Any], int]:
    try:
        return _run_once(engine, name, params, row_factory)
    except psycopg.OperationalError:
        engine.pool.dispose()
        if not safe_to_repeat(name):
            raise
        return _run_once(engine, name, params, row_factory)


def _run_once(engine: sa.Engine, name: str, params: dict[str, Any] | None,
              row_factory: RowFactory[Any]) -> tuple[list[Any], int]:
    conn = engine.raw_connection()
    try:
        with execute_named(psycopg_connection(conn), name, params, row_factory=row_factory) as cursor:
            rows = cursor.fetchall() if cursor.description else []
            return rows, cursor.rowcount
    except psycopg.OperationalError:
        conn.invalidate()  # never hand a broken connection out again
        raise
    finally:
        conn.close()  # back to the pool


def sqlalchemy_url(database_url: str) -> str:
    return "postgresql+psycopg://" + database_url.partition("://")[2]


def connect_options(prepared_statements: bool) -> dict[str, Any]:
    """psycopg.connect() keywords every connection of the service gets. Without prepared statements
    (WA_OUTBOX_DB_PREPARED_STATEMENTS=false), `prepare_threshold=None`: psycopg never creates a named statement on
    the server. PgBouncer in transaction mode before 1.21 (or without max_prepared_statements) hands each transaction
    any server connection, where a statement prepared by another transaction is missing, or exists under the same
    name (https://www.pgbouncer.org/features.html)."""
    return {} if prepared_statements else {"prepare_threshold": None}


def connect(settings: Settings, **kwargs: Any) -> psycopg.Connection:
    """A one-off psycopg connection to the settings' database, with the service's connection options."""
    return psycopg.connect(settings.required("database_url"), **connect_options(settings.db_prepared_statements),
                           **kwargs)


def psycopg_connection(conn: sa.Connection | sa.PoolProxiedConnection) -> psycopg.Connection[Any]:
    """The psycopg connection under a SQLAlchemy one. SQLAlchemy types it as optional (a pooled connection that was
    invalidated has none); here it is always there, and psycopg's: every engine is create_engine's."""
    driver = (conn.connection if isinstance(conn, sa.Connection) else conn).driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise TypeError(f"expected a psycopg 3 connection, not {type(driver).__name__}")
    return driver


def pool_limit(pool_size: int) -> int:
    """The most connections an engine of `pool_size` opens: the pool, and max(2, pool_size // 2) more for bursts."""
    return pool_size + max(2, pool_size // 2)


def create_engine(database_url: str, *, pool_size: int, application_name: str = "wa-outbox",
                  isolation_level: str | None = None, prepared_statements: bool = True) -> sa.Engine:
    """A pooled engine of at most pool_limit(pool_size) connections, each kept open once opened. (SQLAlchemy's
    overflow would close the burst connections as they are returned: under steady load a worker then opened about
    13 backends a second (bench/latency.py at 300/s), each forked, its caches filled and the claim planned again,
    about 10 ms a plan; COMMIT to arrival went from p50 19-23 ms to 62 ms. The cap, what Postgres must allow, is
    the same.) No pre-ping (it costs a round trip per checkout on the hot path): a connection that broke is
    invalidated by SQLAlchemy on the error and replaced on the next checkout. `prepared_statements`: the settings'
    `db_prepared_statements` (connect_options)."""
    return sa.create_engine(
        sqlalchemy_url(database_url),
        pool_size=pool_limit(pool_size),
        max_overflow=0,
        pool_timeout=10,
        pool_recycle=1800,
        connect_args={"application_name": application_name, "connect_timeout": 10,
                      **connect_options(prepared_statements)},
        **({"isolation_level": isolation_level} if isolation_level else {}),
    )


def embedded_database_url(data_dir: str | os.PathLike[str]) -> str:
    """Start (or reuse) the embedded Postgres in `<data_dir>/pgdata` and return its URL.

    The server keeps running while any process that asked for it is alive and stops after the last one exits, so a
    second `make run` reuses the same data and nothing is left running."""
    pgdata = Path(data_dir).resolve() / "pgdata"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # pgserver keeps its lock file in the user's runtime directory; without XDG_RUNTIME_DIR (a container, ssh, sudo)
    # platformdirs warns, twice, that it falls back to /tmp/runtime-<uid>, which serves a laptop's database as well:
    # the warning is noise on every command's stderr.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module=r"platformdirs(\.|$)")
        try:
            import pgserver  # noqa: PLC0415 - optional dependency, only for development without DATABASE_URL
        except ImportError:
            raise ConfigError("DATABASE_URL is not set and the embedded Postgres is not installed "
                              "(pip install 'wa-outbox[embedded]')") from None
        server = pgserver.get_server(str(pgdata), cleanup_mode="stop")
    _EMBEDDED_SERVERS.append(server)  # keep a reference: the server stops when its last handle is dropped
    return usable_url(server.get_uri())


def usable_url(uri: str) -> str:
    """pgserver's URL as another program takes it: `postgresql://postgres:@/postgres?host=<socket dir>` names an empty
    password (shown as *** wherever URLs are redacted, though there is none: the server trusts local connections),
    so the user alone (postgresql://postgres@/postgres?host=...), and the socket directory percent-encoded as a
    query value (a path with a space or a `&`)."""
    base, sep, query = uri.partition("?")
    base = base.replace("://postgres:@", "://postgres@", 1)
    if query.startswith("host=") and "&" not in query:
        query = "host=" + urllib.parse.quote(urllib.parse.unquote(query[len("host="):]), safe="/")
    return base + sep + query


_EMBEDDED_SERVERS: list[object] = []


def with_database(settings: Settings, *, announce: bool = True) -> Settings:
    """`settings` with a database: DATABASE_URL when set, else the embedded Postgres (exported to child processes).
    `announce`: log that it is ready (the services; a command's stderr is for its own errors)."""
    if settings.database_url:
        return settings
    url = embedded_database_url(settings.data_dir)
    os.environ["DATABASE_URL"] = url
    if announce:
        log.info("embedded postgres ready", extra={"data_dir": settings.data_dir})
    return replace(settings, database_url=url)
