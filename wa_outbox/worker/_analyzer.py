"""Give the planner statistics for the queue tables the first time they hold rows, if autovacuum has not: without
them a claim can pick a bitmap scan and sort the whole due queue instead of reading the head of its index."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from .. import queries

log = logging.getLogger("wa_outbox.analyzer")


def analyze_if_never(engine: sa.Engine) -> list[str]:
    tables = queries.tables_never_analyzed(engine)
    for name in tables:  # names come from the catalogue, filtered to two known tables
        with engine.connect() as conn:
            conn.exec_driver_sql(f"ANALYZE wa_outbox.{name}")
        log.info("analyzed wa_outbox.%s (it had no statistics yet)", name)
    return tables
