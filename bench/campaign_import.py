"""Campaign import benchmark: `wa-outbox campaign import` of a generated CSV, in rows/s, end to end.

    .venv/bin/python bench/campaign_import.py [--rows 100000] [--chunk 5000] [--json PATH]

On real Postgres (DATABASE_URL, else the embedded one), in a scratch database (created, migrated, dropped), durable
settings only. The CSV has `to`, `body.1`, `body.2` (a template with two body parameters). Three figures:
- import: the whole command as an operator runs it (read, validate every row, derive keys, write in chunks), with
  the split between reading/validating and writing;
- re-import: the same file again (nothing new: every row already present);
- the check that every row is queued once, with its campaign and priority 1;
- for scale on a loaded machine, `enqueue_many` of as many rows in the same run (writes only, one connection).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _results  # noqa: E402
from wa_outbox import campaigns, migrate  # noqa: E402
from wa_outbox.config import normalize_database_url  # noqa: E402
from wa_outbox.db import create_engine, embedded_database_url  # noqa: E402

SENDER = "100000000000001"
GOAL = 20_000  # rows/s end to end (issue 8)


def write_csv(path: Path, rows: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.write("to,body.1,body.2\n")
        for i in range(rows):
            out.write(f"+55119{i:08d},Cliente {i},pedido {i * 7 % 100000}\n")


def run_import(engine, path: Path, name: str, chunk: int) -> tuple[float, float, campaigns.Imported]:
    started = time.perf_counter()
    read = campaigns.read_csv(campaigns.read_lines(path.read_bytes()), name=name, template="promo", lang="pt_BR")
    assert not read.problems, read.problems[:3]
    validated = time.perf_counter()
    result = campaigns.import_items(engine, name=name, phone_number_id=SENDER, items=read.items, chunk_rows=chunk)
    return validated - started, time.perf_counter() - validated, result


def reference_enqueue_many(url: str, rows: int, chunk: int) -> float:
    """The plain bulk enqueue of the same kind of rows (already validated, keyed), for scale on a loaded machine."""
    items = [{"to": f"55118{i:08d}", "idempotency_key": f"ref-{i}", "phone_number_id": SENDER, "message": {
        "type": "template", "template": {"name": "promo", "language": {"code": "pt_BR"}, "components": [
            {"type": "body", "parameters": [{"type": "text", "text": f"Cliente {i}"},
                                            {"type": "text", "text": f"pedido {i}"}]}]}}} for i in range(rows)]
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        for start in range(0, rows, chunk):
            conn.execute("SELECT wa_outbox.enqueue_many(%s::jsonb)", (json.dumps(items[start:start + chunk]),))
        return rows / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=campaigns.CHUNK_ROWS)
    _results.add_json_argument(parser)
    args = parser.parse_args()
    server = (normalize_database_url(os.environ["DATABASE_URL"]) if os.environ.get("DATABASE_URL")
              else embedded_database_url(os.environ.get("WA_OUTBOX_DATA_DIR", ".wa-outbox")))
    dbname = f"wa_outbox_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
        facts = (f"PostgreSQL {conn.info.server_version // 10000}.{conn.info.server_version % 10000}, "
                 f"synchronous_commit={conn.execute('SHOW synchronous_commit').fetchone()[0]}, "
                 f"shared_buffers={conn.execute('SHOW shared_buffers').fetchone()[0]}; "
                 f"{os.cpu_count()} cores; {campaigns.WRITERS} writer connections")
    url = urlunsplit(urlsplit(server)._replace(path=f"/{dbname}"))
    try:
        migrate.upgrade(url)
        engine = create_engine(url, pool_size=campaigns.WRITERS, isolation_level="AUTOCOMMIT")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "campaign.csv"
            write_csv(path, args.rows)
            read_s, write_s, result = run_import(engine, path, "bench", args.chunk)
            total = read_s + write_s
            rate = args.rows / total
            print(f"import of {args.rows:,} rows (chunks of {args.chunk:,}): {rate:,.0f} rows/s "
                  f"({total:.2f} s: read and validate {read_s:.2f} s, write {write_s:.2f} s = "
                  f"{args.rows / write_s:,.0f} rows/s)")
            assert (result.imported, result.present) == (args.rows, 0), result
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ANALYZE wa_outbox.notifications")
            again_read_s, again_write_s, again = run_import(engine, path, "bench", args.chunk)
            again_rate = args.rows / (again_read_s + again_write_s)
            print(f"re-import (all present): {again_rate:,.0f} rows/s "
                  f"({again_read_s + again_write_s:.2f} s), {again.imported} imported, "
                  f"{again.present:,} already present")
            assert again.imported == 0
        with psycopg.connect(url, autocommit=True) as conn:
            queued = conn.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'queued' "
                                  "AND priority = 1 AND campaign_id = %s", (result.campaign_id,)).fetchone()[0]
        assert queued == args.rows, queued
        print(f"check: {queued:,} rows queued once, campaign {result.campaign_id}, priority 1")
        reference = reference_enqueue_many(url, args.rows, args.chunk)
        print(f"reference, same run: enqueue_many of {args.rows:,} rows (chunks of {args.chunk:,}, one connection): "
              f"{reference:,.0f} rows/s")
        engine.dispose()
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    reference_name = f"SQL enqueue_many of as many rows, writes only (one connection, chunks of {args.chunk:,})"
    _results.write(args.json, "campaign_import", {
        "rows": args.rows, "chunk": args.chunk, "writers": campaigns.WRITERS,
        "import_rows_per_s": rate, "read_validate_s": read_s, "write_s": write_s,
        "write_rows_per_s": args.rows / write_s, "reimport_rows_per_s": again_rate,
        "reference_rows_per_s": reference, "reference_name": reference_name,
        "headline": [
            {"what": f"campaign import, {args.rows:,} rows, end to end", "unit": "rows/s", "value": rate,
             "reference": reference, "reference_name": reference_name, "ratio": rate / reference,
             "goal": f">= {GOAL:,} rows/s", "met": rate >= GOAL},
            {"what": "campaign re-import, every row already present", "unit": "rows/s", "value": again_rate,
             "reference": None, "reference_name": None, "ratio": None, "goal": None, "met": None},
        ],
        "tables": [{"title": f"Campaign import of {args.rows:,} rows: where the time goes",
                    "columns": ["step", "seconds", "rows/s"],
                    "rows": [["read the CSV, validate every row, derive keys", round(read_s, 2),
                              round(args.rows / read_s)],
                             [f"write ({campaigns.WRITERS} connections, chunks of {args.chunk:,})", round(write_s, 2),
                              round(args.rows / write_s)],
                             ["end to end", round(total, 2), round(rate)]]}],
    }, facts=facts)


if __name__ == "__main__":
    main()
