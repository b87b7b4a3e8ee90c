"""Give the planner statistics for the queue tables where autovacuum has not (it is off, or has not come by yet):
the first time a table holds rows, and again once it has changed by more rows than it held at its last analysis.

Without statistics a claim can pick a bitmap scan and sort the whole due queue instead of reading the head of its
index. With statistics taken while a table was nearly empty, a statement prepared since keeps a plan made for a few
rows: the deliveries' record statement scanned the whole table for each outcome, each batch costing more as the
table grew (bench/deliveries.py with autovacuum off: 1.6 ms of statements per delivery after 18,000, 0.2 ms with the
table analyzed once it held rows). ANALYZE also replaces the cached plans that read the old statistics. The rule
(tables_to_analyze.sql) analyzes a growing table a few times, each at about twice the size of the last: where
autovacuum runs, its own lower threshold comes first.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from .. import queries

log = logging.getLogger("wa_outbox.analyzer")

# Changes since the last analysis below which a table is left to autovacuum, however small it was then.
MIN_CHANGES = 1000


def analyze_if_needed(engine: sa.Engine) -> list[str]:
    """ANALYZE the queue tables tables_to_analyze.sql names; their names."""
    tables = queries.tables_to_analyze(engine, min_changes=MIN_CHANGES)
    for name in tables:  # names come from the catalogue, filtered to known tables
        with engine.connect() as conn:
            # SKIP_LOCKED: a table autovacuum is working on is left to it (waiting for its lock would cancel it)
            conn.exec_driver_sql(f"ANALYZE (SKIP_LOCKED) wa_outbox.{name}")
        log.info("analyzed wa_outbox.%s (its statistics were missing or outgrown)", name)
    return tables
