"""The service's pools keep every connection they open: a burst above the pool's size must not close connections as
they are returned (SQLAlchemy's overflow does), or the next burst forks new backends that plan their statements
again (wa_outbox/db.py create_engine)."""

from __future__ import annotations

import sqlalchemy as sa

from wa_outbox import db


def _hold(engine: sa.Engine, n: int) -> None:
    """Check out n connections at once, use each, return them all."""
    held = [engine.raw_connection() for _ in range(n)]
    for conn in held:
        db.psycopg_connection(conn).execute("SELECT 1")
    for conn in held:
        conn.close()


def test_a_burst_to_the_limit_opens_no_connection_the_second_time(database_url: str) -> None:
    engine = db.create_engine(database_url, pool_size=4, isolation_level="AUTOCOMMIT")
    opened: list[int] = []
    sa.event.listen(engine, "connect", lambda dbapi_conn, record: opened.append(id(dbapi_conn)))
    limit = db.pool_limit(4)
    try:
        _hold(engine, limit)
        assert len(opened) == limit
        _hold(engine, limit)
        _hold(engine, limit)
        assert len(opened) == limit  # all kept: none closed on return, none opened again
        assert engine.pool.checkedin() == limit
    finally:
        engine.dispose()


def test_the_limit_is_what_it_was_with_overflow() -> None:
    # The most connections a process may open is what docs/scaling.md counts: the pool and max(2, pool // 2) more.
    assert [db.pool_limit(n) for n in (1, 4, 8, 16)] == [3, 6, 12, 24]
