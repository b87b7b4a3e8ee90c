"""Outbox benchmark: wa-outbox's enqueue and send pipeline, each figure beside a reference measured in the same run.

    .venv/bin/python bench/outbox.py [--n 20000] [--quick] [--skip-peers] [--cases enqueue,dry,full,slow]
                                     [--enqueue-only] [--json docs/results/outbox.json]
    .venv/bin/pip install -r bench/requirements-peers.txt   # the pgqueuer and procrastinate references

On real Postgres (DATABASE_URL, else the embedded one), each system in a scratch database of its own (created and
dropped), durable settings only (synchronous_commit as the server has it, never turned off), N messages per case:
- enqueue: single (one transaction per message) and bulk (`enqueue_many`, the best of CHUNKS), in messages/s,
  beside pgqueuer's and procrastinate's single and batch enqueue;
- the queue machinery alone: workers in dry-run mode (claim, record, timeline events; no HTTP), beside a no-op
  drain of pgqueuer and of procrastinate;
- the full drain: real sends through `requests` to the Graph API simulator (a process of its own, schema validation
  off), beside bare `requests.Session` clients posting the same bodies to the same server from as many processes and
  threads, for BARE_SECONDS or N requests, whichever ends first;
- the full drain with LATENCY_MS of added API latency, beside the zero-latency drain.
The dry-run and full drains are measured with 1, 2 and 4 worker processes (PROCESS_SWEEP), each full drain right
after the bare client of as many processes (adjacent in time, so both see the same machine); the full drain of
DRY_RUN/FULL's process count is the headline. After that drain, the timeline gives each message's pipeline latency
(its `sending` event to its `sent` event: the HTTP call plus the wait to be recorded) in percentiles.
Workers run as processes of their own (each row names its setup: processes x worker_concurrency) and are timed from
their start (imports done) until no row is queued or sending; then every drain is checked: N rows sent, N messages
accepted by the simulator, no callback id twice. Every case starts from the same state: the queue and the timeline
emptied, then filled, then the whole database VACUUMed and ANALYZEd, as autovacuum would have left a live server's
tables (a run this short outpaces it: the cases before leave dead rows, and a never-analyzed table is planned
differently).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import multiprocessing
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import requests
from requests.adapters import HTTPAdapter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import add_json_argument, write  # noqa: E402
from wa_outbox import enqueue, enqueue_many, migrate  # noqa: E402
from wa_outbox.config import Settings, normalize_database_url  # noqa: E402
from wa_outbox.db import embedded_database_url  # noqa: E402
from wa_outbox.enqueue import batch_json  # noqa: E402
from wa_outbox.worker import Worker  # noqa: E402
from wa_outbox.worker._priority import lower_priority  # noqa: E402

SENDER = "100000000000001"
TOKEN = "bench-token"
CHUNKS = (1000, 2000, 5000)  # bulk/batch enqueue chunk sizes tried; the best is reported
LATENCY_MS = 200
BARE_SECONDS = 10.0
# (worker processes, worker_concurrency), each the best of a sweep on the 2-core machine (dry run: 1 x 128 15.0k,
# 2 x 64 15.5k, 1 x 256 18.2k, 2 x 128 18.5k; full: 2 x 32 1.65k, 2 x 64 1.76k; +200 ms: 2 x 200 1.39k, 3 x 160 1.50k,
# 2 x 256 1.54k). One requests process is GIL-bound at about 1,100 req/s: the process sweep compares each count with
# as many bare client processes.
DRY_RUN = (2, 128)
FULL = (2, 64)
SLOW = (2, 256)
PROCESS_SWEEP = (1, 2, 4)  # worker processes (and bare client processes) for the "throughput vs processes" plot
FULL_GOAL = 0.9            # full drain, FULL setup: at least this share of the bare client's rate (issue 10)
CASES = ("enqueue", "dry", "full", "slow")
PGQ_CONSUMERS, PGQ_BATCH = 2, 100  # pgqueuer no-op drain: consumers (a connection each) x dequeue batch size
PROCRASTINATE_CONCURRENCY = 8      # procrastinate no-op drain: one worker, this many concurrent jobs
PEERS_HINT = ".venv/bin/pip install -r bench/requirements-peers.txt"
PENDING = "SELECT count(*) FROM wa_outbox.notifications WHERE status IN ('queued', 'sending')"
SPAWN = multiprocessing.get_context("spawn")


@dataclasses.dataclass
class Row:
    name: str
    value: float | None
    reference: str
    ref_value: float | str  # a rate, or "n/a (reason)"
    floor: float | None = None  # goal: value >= floor
    share: float | None = None  # goal: value >= share x ref_value

    def goal(self) -> str:
        if self.floor is not None:
            return f"≥ {self.floor:,.0f}/s"
        if self.share is not None:
            return "≥ reference" if self.share == 1 else f"≥ {self.share:g} x reference"
        return ""

    def result(self) -> str:
        if self.floor is not None:
            return "PASS" if self.value >= self.floor else "FAIL"
        if self.share is None:
            return ""
        if not isinstance(self.ref_value, (int, float)):
            return "n/a"
        return "PASS" if self.value >= self.share * self.ref_value else "FAIL"


# --- data --------------------------------------------------------------------------------------------------------


def make_items(n: int) -> list[dict]:
    return [{"to": f"+5511{900000000 + i:09d}",
             "message": {"type": "text", "text": {"body": f"Olá! Seu pedido {i} saiu para entrega ✓"}}}
            for i in range(n)]


def graph_body(item: dict, callback: str) -> bytes:
    """What wa-outbox's transport posts for `item` (wa_outbox/worker/_outcomes.py request_body, _transport.py)."""
    body = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": item["to"], **item["message"],
            "biz_opaque_callback_data": callback}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def rate(count: int, started: float) -> float:
    return count / (time.perf_counter() - started)


def label(setup: tuple[int, int]) -> str:
    processes, concurrency = setup
    return f"{processes} process{'es' if processes > 1 else ''} x {concurrency}"


# --- Postgres ----------------------------------------------------------------------------------------------------


def server_url() -> str:
    if os.environ.get("DATABASE_URL"):
        return normalize_database_url(os.environ["DATABASE_URL"])
    return embedded_database_url(ROOT / ".wa-outbox")


@contextlib.contextmanager
def scratch_database(server: str, system: str) -> Iterator[str]:
    name = f"wa_outbox_bench_{system}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def machine_facts(server: str) -> str:
    with psycopg.connect(server, autocommit=True) as conn:
        version, sync, autovacuum = (conn.execute(f"SHOW {name}").fetchone()[0]
                                     for name in ("server_version", "synchronous_commit", "autovacuum"))
    return (f"{os.cpu_count()} cores, shared by Postgres, the simulator, the workers and the clients; "
            f"PostgreSQL {version}; synchronous_commit={sync}; autovacuum={autovacuum}")


def analyze(url: str) -> None:
    """VACUUM and ANALYZE everything, as autovacuum would have left a live server's tables: the cases before this
    one (the enqueue cases, earlier drains) leave dead rows behind, and autovacuum is off during the run."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


PROBLEMS: list[str] = []


def check(ok: bool, problem: str) -> None:
    if not ok:
        PROBLEMS.append(problem)
        print(f"CHECK FAILED: {problem}", flush=True)


# --- the Graph API simulator, in a process of its own ------------------------------------------------------------


def _serve_simulator(pipe: Any) -> None:
    from wa_outbox.simulator import SimulatorServer
    sim = SimulatorServer(access_token=TOKEN, app_secret="x", webhook_url=None, validate=False).start()
    pipe.send(sim.url)
    threading.Event().wait()  # until the parent terminates the process


class Simulator:
    def __init__(self) -> None:
        parent, child = SPAWN.Pipe()
        self.process = SPAWN.Process(target=_serve_simulator, args=(child,), daemon=True)
        self.process.start()
        if not parent.poll(30):
            raise SystemExit("the simulator did not start")
        self.url = parent.recv()
        self.base_url = f"{self.url}/v23.0"

    def reset(self, latency_ms: int = 0) -> None:
        requests.post(f"{self.url}/_admin/reset", timeout=10).raise_for_status()
        faults = [{"mode": "latency", "ms": latency_ms}] if latency_ms else []
        requests.put(f"{self.url}/_admin/faults", json=faults, timeout=10).raise_for_status()

    def check_accepted(self, n: int) -> None:
        answer = requests.get(f"{self.url}/_admin/messages", timeout=60)
        answer.raise_for_status()
        messages = answer.json()["messages"]
        callbacks = {m["biz_opaque_callback_data"] for m in messages}
        check(len(messages) == n, f"the simulator accepted {len(messages)} messages, expected {n}")
        check(len(callbacks) == len(messages), f"{len(messages) - len(callbacks)} callback ids seen twice")

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(10)


# --- wa-outbox ---------------------------------------------------------------------------------------------------


def wa_setup(url: str) -> None:
    migrate.upgrade(url)
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO wa_outbox.settings (key, value) VALUES ('default_phone_number_id', %s)", (SENDER,))


def wa_clear(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("SET LOCAL wa_outbox.allow_prune = 'on'")  # the timeline refuses TRUNCATE otherwise
        # the events the last case's sends emitted too: each case starts from the same state
        conn.execute("TRUNCATE wa_outbox.notifications, wa_outbox.notification_events, wa_outbox.workers, "
                     "wa_outbox.events")


def wa_single(url: str, items: list[dict]) -> float:
    """One transaction per message, as the peers measure it: each enqueue statement commits on its own (an app
    enqueuing inside its own transaction pays its BEGIN/COMMIT round trips anyway)."""
    wa_clear(url)
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        for item in items:
            enqueue(conn, to=item["to"], message=item["message"])
        return rate(len(items), started)


# Postgres's CPU per message of each chunk size's bulk enqueue, read from its backend process (a server on this
# machine only). Measured, where "wall time minus Python's work alone" is not Postgres's part: the pipeline overlaps
# the two, and on a shared machine that difference follows the load (11 to 38 µs in six runs of one commit, one
# morning, while the backend's CPU stayed at 20-22 µs).
BULK_BACKEND_CPU_US: dict[int, float] = {}


def backend_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a Postgres backend process, or None if it is not on this machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wa_bulk(url: str, items: list[dict], chunk: int) -> float:
    wa_clear(url)
    with psycopg.connect(url, autocommit=True) as conn:  # one statement, one transaction, per chunk
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        cpu_before = backend_cpu_seconds(pid)
        started = time.perf_counter()
        for start in range(0, len(items), chunk):
            enqueue_many(conn, items[start:start + chunk])
        result = rate(len(items), started)
        cpu_after = backend_cpu_seconds(pid)
    if cpu_before is not None and cpu_after is not None:
        BULK_BACKEND_CPU_US[chunk] = 1e6 * (cpu_after - cpu_before) / len(items)
    return result


def wa_bulk_python(items: list[dict], chunk: int) -> float:
    """enqueue_many's own work in Python alone (checks, the batch's JSON), in messages/s: where the time goes."""
    started = time.perf_counter()
    for start in range(0, len(items), chunk):
        batch_json(items[start:start + chunk])
    return rate(len(items), started)


def wa_fill(url: str, items: list[dict]) -> None:
    wa_bulk(url, items, max(CHUNKS))
    analyze(url)


def _run_worker(settings: Settings, start: Any, stop: Any) -> None:
    """One worker process: imports and set-up first, then the start barrier, then work until `stop` is set. At the
    worker's niceness, as `wa-outbox worker` runs (WA_OUTBOX_WORKER_NICE)."""
    lower_priority(settings.worker_nice)
    worker = Worker(settings)
    start.wait()
    threading.Thread(target=lambda: (stop.wait(), worker.stop()), daemon=True).start()
    worker.run()


def wa_drain(url: str, n: int, setup: tuple[int, int], *, api_base_url: str = Settings.api_base_url,
             dry_run: bool = False) -> float:
    """Messages/s of `setup` (processes, concurrency) workers, from their start until no row is queued or sending."""
    processes, concurrency = setup
    settings = dataclasses.replace(
        Settings.from_env({k: v for k, v in os.environ.items() if k.startswith("WA_OUTBOX_PAIR_")}),
        database_url=url, access_token=TOKEN, phone_number_id=SENDER, api_base_url=api_base_url,
        worker_concurrency=concurrency, rate_limit_mps=1e6, poll_interval=0.1, dry_run=dry_run)
    start, stop = SPAWN.Barrier(processes + 1), SPAWN.Event()
    workers = [SPAWN.Process(target=_run_worker, args=(settings, start, stop), daemon=True)
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    with psycopg.connect(url, autocommit=True) as conn:
        start.wait(timeout=60)
        started = time.perf_counter()
        while conn.execute(PENDING).fetchone()[0]:
            time.sleep(0.05)
        result = rate(n, started)
        sent = conn.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'sent'").fetchone()[0]
    stop.set()
    for worker in workers:
        worker.join(60)
    check(sent == n, f"{sent} of {n} rows sent")
    return result


LATENCY = """
SELECT percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY ms) AS pipeline,
       max(ms) AS pipeline_max,
       percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY http_ms) AS http,
       count(*) FILTER (WHERE reslotted) AS reslotted,
       (SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'released') AS released
FROM (SELECT extract(epoch FROM d.created_at - s.created_at)::float8 * 1000 AS ms, (d.detail->>'ms')::float AS http_ms,
             d.detail ? 'send_at' AS reslotted
      FROM wa_outbox.notification_events d
      JOIN wa_outbox.notification_events s ON s.notification_id = d.notification_id AND s.event = 'sending'
      WHERE d.event = 'sent') t
"""


def drain_latency(url: str) -> dict[str, float]:
    """Percentiles (ms) of the last drain: `sending` to `sent` event (pipeline) and the HTTP call alone."""
    with psycopg.connect(url, autocommit=True) as conn:
        pipeline, pipeline_max, http, reslotted, released = conn.execute(LATENCY).fetchone()
    return {"sent_reslotted": reslotted, "given_back": released,
            "pipeline_p50_ms": pipeline[0], "pipeline_p90_ms": pipeline[1], "pipeline_p99_ms": pipeline[2],
            "pipeline_max_ms": pipeline_max, "http_p50_ms": http[0], "http_p90_ms": http[1], "http_p99_ms": http[2]}


# --- the bare client ---------------------------------------------------------------------------------------------


def _post_bodies(base_url: str, bodies: list[bytes], threads: int, seconds: float, start: Any, results: Any) -> None:
    """One bare client process: a pooled requests.Session, `threads` threads posting `bodies` for `seconds`."""
    session = requests.Session()
    session.mount("http://", HTTPAdapter(pool_maxsize=threads))
    session.headers.update({"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    url = f"{base_url}/{SENDER}/messages"
    todo = iter(bodies)
    lock = threading.Lock()
    counts = {"done": 0, "failed": 0}

    def post() -> None:
        while time.perf_counter() < deadline:
            with lock:
                body = next(todo, None)
            if body is None:
                return
            response = session.post(url, data=body, timeout=(5, 15))
            ok = response.status_code == 200 and "messages" in response.json()
            with lock:
                counts["done"] += 1
                counts["failed"] += not ok

    posters = [threading.Thread(target=post) for _ in range(threads)]
    start.wait()
    started = time.perf_counter()
    deadline = started + seconds
    for poster in posters:
        poster.start()
    for poster in posters:
        poster.join()
    results.put((counts["done"], counts["failed"], time.perf_counter() - started))


def bare_client(base_url: str, bodies: list[bytes], setup: tuple[int, int], seconds: float) -> float:
    """Requests/s of `setup` (processes, threads each) bare clients posting `bodies` between them."""
    processes, threads = setup
    start, results = SPAWN.Barrier(processes), SPAWN.Queue()
    clients = [SPAWN.Process(target=_post_bodies, args=(base_url, bodies[i::processes], threads, seconds, start,
                                                         results), daemon=True) for i in range(processes)]
    for client in clients:
        client.start()
    done, failed, elapsed = zip(*(results.get(timeout=seconds + 60) for _ in clients), strict=True)
    for client in clients:
        client.join(10)
    check(sum(failed) == 0, f"the bare client got {sum(failed)} failed answers")
    return sum(done) / max(elapsed)


# --- peers -------------------------------------------------------------------------------------------------------


async def pgqueuer_bench(url: str, items: list[dict], drain: bool = True) -> dict[str, float]:
    import asyncpg
    from pgqueuer import PgQueuer, Queries
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.types import QueueExecutionMode

    payloads = [json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode() for item in items]
    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    await queries.install()

    async def batch(chunk: int) -> float:
        await queries.clear_queue()
        started = time.perf_counter()
        for start in range(0, len(payloads), chunk):
            part = payloads[start:start + chunk]
            await queries.enqueue(["send"] * len(part), part, [0] * len(part))
        return rate(len(payloads), started)

    started = time.perf_counter()
    for payload in payloads:
        await queries.enqueue("send", payload)
    results = {"single": rate(len(payloads), started)}
    results["batch"], results["chunk"] = max([(await batch(chunk), chunk) for chunk in CHUNKS])
    if not drain:
        await conn.close()
        return results
    await batch(max(CHUNKS))
    await conn.execute("ANALYZE")

    consumers = [PgQueuer(AsyncpgDriver(await asyncpg.connect(url))) for _ in range(PGQ_CONSUMERS)]
    for pgq in consumers:
        @pgq.entrypoint("send")
        async def send(job: Any) -> None:  # a no-op job
            pass
    started = time.perf_counter()
    await asyncio.gather(*(pgq.run(batch_size=PGQ_BATCH, mode=QueueExecutionMode.drain) for pgq in consumers))
    results["drain"] = rate(len(payloads), started)
    left = sum(stat.count for stat in await queries.queue_size())
    check(left == 0, f"pgqueuer left {left} jobs in its queue")
    await conn.close()
    return results


async def procrastinate_bench(url: str, items: list[dict], drain: bool = True) -> dict[str, float]:
    import procrastinate

    # Its warning about an App defined in __main__ concerns workers started by module path, not this in-process one.
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=url, min_size=2, max_size=PROCRASTINATE_CONCURRENCY + 4))

    @app.task(name="send")
    async def send(to: str, message: dict) -> None:  # a no-op job
        pass

    async def batch(chunk: int) -> float:
        await app.connector.execute_query_async("TRUNCATE procrastinate_jobs CASCADE")
        started = time.perf_counter()
        for start in range(0, len(items), chunk):
            await send.batch_defer_async(*items[start:start + chunk])
        return rate(len(items), started)

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        started = time.perf_counter()
        for item in items:
            await send.defer_async(**item)
        results = {"single": rate(len(items), started)}
        results["batch"], results["chunk"] = max([(await batch(chunk), chunk) for chunk in CHUNKS])
        if not drain:
            return results
        await batch(max(CHUNKS))
        await app.connector.execute_query_async("ANALYZE")
        started = time.perf_counter()
        await app.run_worker_async(concurrency=PROCRASTINATE_CONCURRENCY, wait=False, install_signal_handlers=False)
        results["drain"] = rate(len(items), started)
        left = (await app.connector.execute_query_one_async(
            "SELECT count(*) AS left FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"))["left"]
        check(left == 0, f"procrastinate left {left} jobs in its queue")
    return results


def run_async(coroutine: Any) -> Any:
    """On uvloop when installed (a pgqueuer dependency, and what pgqueuer's own benchmark runs on)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def run_peer(name: str, bench: Callable, server: str, items: list[dict], drain: bool = True) -> dict[str, Any]:
    """The peer's figures, or {"error": reason}."""
    print(f"{name}: enqueue single, batch ({', '.join(map(str, CHUNKS))}){', no-op drain' if drain else ''} ...",
          flush=True)
    try:
        with scratch_database(server, name) as url:
            return run_async(bench(url, items, drain))
    except ImportError:
        print(f"{name} is not installed: {PEERS_HINT} (its reference rows are skipped)")
        return {"error": "not installed"}
    except Exception as exc:  # noqa: BLE001 - a reference that cannot be measured is reported, not fatal
        return {"error": f"{type(exc).__name__}: {exc}"[:60]}


def peer(figures: dict[str, Any], key: str) -> float | str:
    return f"n/a ({figures['error']})" if "error" in figures else figures[key]


def chunk_of(figures: dict[str, Any]) -> str:
    return f", chunk {figures['chunk']}" if "chunk" in figures else ""


# --- the table ---------------------------------------------------------------------------------------------------


def print_table(rows: list[Row]) -> None:
    print(f"{'measurement':<42}{'wa-outbox':>10}  {'reference (same run)':<44}{'value':>10}{'ratio':>7}  "
          f"{'goal':<20}result")
    for row in rows:
        numeric = isinstance(row.ref_value, (int, float))
        value = "" if row.value is None else f"{row.value:,.0f}"
        ref = f"{row.ref_value:,.0f}" if numeric else row.ref_value
        ratio = f"{row.value / row.ref_value:.2f}" if numeric and row.value is not None else ""
        print(f"{row.name:<42}{value:>10}  {row.reference:<44}{ref:>10}{ratio:>7}  {row.goal():<20}{row.result()}")


def headline(what: str, value: float | None, ref: float | str, ref_name: str, share: float | None,
             unit: str = "msgs/s") -> dict[str, Any]:
    numeric = isinstance(ref, (int, float)) and value is not None
    ratio = value / ref if numeric else None
    return {"what": what, "unit": unit, "value": value, "reference": ref if numeric else None,
            "reference_name": ref_name if numeric else f"{ref_name}: {ref}", "ratio": ratio,
            "goal": None if share is None else f">= {share:g} of the reference",
            "met": None if share is None or ratio is None else ratio >= share}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000, help="messages per case (default 20000)")
    parser.add_argument("--quick", action="store_true", help="N=5000, for a fast check")
    parser.add_argument("--skip-peers", action="store_true", help="skip the pgqueuer and procrastinate references")
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated subset of {', '.join(CASES)} (default: all)")
    parser.add_argument("--processes", default=",".join(map(str, PROCESS_SWEEP)),
                        help="worker process counts of the dry-run and full drain sweeps (default 1,2,4)")
    parser.add_argument("--enqueue-only", action="store_true", help="only the enqueue cases (= --cases enqueue)")
    add_json_argument(parser)
    args = parser.parse_args()
    n = 5000 if args.quick else args.n
    cases = {"enqueue"} if args.enqueue_only else set(args.cases.split(","))
    if cases - set(CASES):
        parser.error(f"unknown case(s): {', '.join(sorted(cases - set(CASES)))}; choose from {', '.join(CASES)}")
    sweep = sorted({int(p) for p in args.processes.split(",")} | {DRY_RUN[0], FULL[0]})

    server = server_url()
    # each wa-outbox drain runs on the state autovacuum would leave a live server's tables in (wa_fill: VACUUM
    # (ANALYZE) after filling the queue): the published facts say so (issue 22's dry-run drain)
    facts = (machine_facts(server) + "; each wa-outbox drain starts on a database just VACUUMed and ANALYZEd, as "
             "autovacuum would leave a live server's tables")
    print(facts, flush=True)
    items = make_items(n)
    bodies = [graph_body(item, str(i)) for i, item in enumerate(items, 1)]
    single = bulk = chunk = bulk_python = None
    dry: dict[int, float] = {}
    full: dict[int, float] = {}
    bare: dict[int, float] = {}
    latency: dict[str, float] = {}
    slow = None
    sim = Simulator() if cases & {"full", "slow"} else None
    try:
        with scratch_database(server, "wa") as url:
            wa_setup(url)
            if "enqueue" in cases:
                print(f"wa-outbox: enqueue single, bulk ({', '.join(map(str, CHUNKS))}) ...", flush=True)
                single = wa_single(url, items)
                bulk, chunk = max((wa_bulk(url, items, chunk), chunk) for chunk in CHUNKS)
                bulk_python = wa_bulk_python(items, chunk)
            for processes in sweep if "dry" in cases else ():
                setup = (processes, DRY_RUN[1])
                print(f"wa-outbox: dry-run drain, {label(setup)} ...", flush=True)
                wa_fill(url, items)
                dry[processes] = wa_drain(url, n, setup, dry_run=True)
            for processes in sweep if "full" in cases else ():
                setup = (processes, FULL[1])
                print(f"bare client: {label(setup)} threads, {BARE_SECONDS:g} s or {n} requests ...", flush=True)
                sim.reset()
                bare[processes] = bare_client(sim.base_url, bodies, setup, BARE_SECONDS)
                print(f"wa-outbox: full drain, {label(setup)} ...", flush=True)
                wa_fill(url, items)
                sim.reset()
                full[processes] = wa_drain(url, n, setup, api_base_url=sim.base_url)
                sim.check_accepted(n)
                if processes == FULL[0]:
                    latency = drain_latency(url)
            if "slow" in cases:
                print(f"wa-outbox: +{LATENCY_MS} ms drain, {label(SLOW)} ...", flush=True)
                wa_fill(url, items)
                sim.reset(LATENCY_MS)
                slow = wa_drain(url, n, SLOW, api_base_url=sim.base_url)
                sim.check_accepted(n)
    finally:
        if sim is not None:
            sim.stop()

    skipped = {"error": "--skip-peers" if args.skip_peers else "case not run"}
    peers_wanted = not args.skip_peers and cases & {"enqueue", "dry"}
    peer_drain = "dry" in cases
    pgq = run_peer("pgqueuer", pgqueuer_bench, server, items, peer_drain) if peers_wanted else skipped
    pro = run_peer("procrastinate", procrastinate_bench, server, items, peer_drain) if peers_wanted else skipped
    print(f"\n{facts}\nN = {n} per case; rates in messages, jobs or requests per second; worker setups are "
          f"processes x worker_concurrency\n")
    rows = []
    if "enqueue" in cases:
        rows += [
            Row("enqueue, single (1 transaction each)", single, "pgqueuer enqueue, single", peer(pgq, "single"),
                share=1),
            Row("", None, "procrastinate defer, single", peer(pro, "single")),
            Row(f"enqueue_many, chunk {chunk}", bulk, f"pgqueuer enqueue, batch{chunk_of(pgq)}", peer(pgq, "batch"),
                floor=60_000),
            Row("", None, f"procrastinate batch_defer{chunk_of(pro)}", peer(pro, "batch"))]
    if dry:
        rows += [Row(f"dry-run drain, {label(DRY_RUN)}", dry[DRY_RUN[0]],
                     f"pgqueuer no-op drain, {PGQ_CONSUMERS} x batch {PGQ_BATCH}", peer(pgq, "drain"), share=1),
                 Row("", None, f"procrastinate no-op drain, concurrency {PROCRASTINATE_CONCURRENCY}",
                     peer(pro, "drain"))]
        rows += [Row(f"dry-run drain, {label((p, DRY_RUN[1]))}", dry[p], "", "") for p in sweep if p != DRY_RUN[0]]
    for p in sweep if full else ():
        setup = (p, FULL[1])
        rows.append(Row(f"full drain, {label(setup)}", full[p], f"bare client, {label(setup)} threads", bare[p],
                        share=FULL_GOAL if p == FULL[0] else None))
    if slow is not None:
        rows.append(Row(f"+{LATENCY_MS} ms latency drain, {label(SLOW)}", slow,
                        f"full drain, {label(FULL)}" if full else "full drain: case not run",
                        full.get(FULL[0], "n/a"), share=0.8))
    print_table(rows)
    bulk_cpu = BULK_BACKEND_CPU_US.get(chunk) if chunk else None
    if bulk and bulk_python:
        server_us = 1e6 / bulk - 1e6 / bulk_python
        print(f"\nenqueue_many, chunk {chunk}, where the time goes: {1e6 / bulk:.1f} µs per message; Python's own "
              f"work (checks, the batch's JSON) alone takes {1e6 / bulk_python:.1f} µs; the other {server_us:.1f} µs "
              f"are not overlapped by the pipeline (Postgres's statements, round trips, commit, and the machine's "
              f"other load); Postgres's backend CPU, measured: "
              + (f"{bulk_cpu:.1f} µs per message" if bulk_cpu is not None
                 else "n/a (the server is not on this machine)"))
    if latency:
        print(f"\nfull drain, {label(FULL)}: pipeline latency (sending -> sent event) p50 "
              f"{latency['pipeline_p50_ms']:.1f} ms, p90 {latency['pipeline_p90_ms']:.1f} ms, p99 "
              f"{latency['pipeline_p99_ms']:.1f} ms; HTTP call p50 {latency['http_p50_ms']:.1f} ms, p99 "
              f"{latency['http_p99_ms']:.1f} ms; sent in a new slot (late for theirs) {latency['sent_reslotted']}, "
              f"given back to the queue {latency['given_back']}")

    results: dict[str, Any] = {"n": n, "setups": {"dry_run": DRY_RUN, "full": FULL, "slow": SLOW},
                               "dry_drain": {str(p): v for p, v in dry.items()},
                               "full_drain": {str(p): v for p, v in full.items()},
                               "bare_client": {str(p): v for p, v in bare.items()},
                               "slow_drain": slow, "latency_full_ms": latency or None,
                               "enqueue": {"single": single, "bulk": bulk, "chunk": chunk,
                                           "bulk_python_only": bulk_python, "bulk_backend_cpu_us": bulk_cpu},
                               "pgqueuer": pgq, "procrastinate": pro, "problems": PROBLEMS}
    headlines = []
    if bulk:
        headlines.append(headline(f"enqueue_many, chunk {chunk}", bulk, peer(pgq, "batch"),
                                  f"pgqueuer enqueue, batch{chunk_of(pgq)}", None))
        headlines[-1].update(goal=">= 60,000/s", met=bulk >= 60_000)
    if full:
        headlines.append(headline(f"full drain through requests, {label(FULL)}", full[FULL[0]], bare[FULL[0]],
                                  f"bare requests client, {label(FULL)} threads", FULL_GOAL))
    if dry:
        headlines.append(headline(f"dry-run drain (claim + record, no HTTP), {label(DRY_RUN)}", dry[DRY_RUN[0]],
                                  peer(pgq, "drain"), f"pgqueuer no-op drain, {PGQ_CONSUMERS} x batch {PGQ_BATCH}",
                                  1.0))
    if slow is not None:
        headlines.append(headline(f"full drain, +{LATENCY_MS} ms API latency, {label(SLOW)}", slow,
                                  full.get(FULL[0], "case not run"), f"zero-latency full drain, {label(FULL)}", 0.8))
    results["headline"] = headlines
    series = {}
    if dry:
        series[f"dry-run drain (x {DRY_RUN[1]})"] = [[p, v] for p, v in sorted(dry.items())]
    if full:
        series[f"full drain (x {FULL[1]})"] = [[p, v] for p, v in sorted(full.items())]
        series[f"bare requests client (x {FULL[1]} threads)"] = [[p, v] for p, v in sorted(bare.items())]
    results["plots"] = [{"name": "outbox-drain-vs-processes", "title": "Drain throughput vs worker processes",
                         "x_label": "processes", "y_label": "messages/s", "kind": "line", "series": series}] \
        if series else []
    results["tables"] = [{"title": f"Full drain latency, {label(FULL)} (ms)",
                          "columns": ["what", "p50", "p90", "p99"],
                          "rows": [["sending -> sent event (HTTP call + wait to be recorded)",
                                    *(round(latency[f"pipeline_{q}_ms"], 1) for q in ("p50", "p90", "p99"))],
                                   ["HTTP call alone",
                                    *(round(latency[f"http_{q}_ms"], 1) for q in ("p50", "p90", "p99"))]]}] \
        if latency else []
    if bulk and bulk_python:
        server_us = 1e6 / bulk - 1e6 / bulk_python
        results["tables"].append({
            "title": f"enqueue_many, chunk {chunk}: where the time goes (same run)",
            "columns": ["part", "µs per message", "share"],
            "rows": [["Python's own work: checks, the batch's JSON (measured alone)", round(1e6 / bulk_python, 1),
                      round(bulk / bulk_python, 2)],
                     ["not overlapped: Postgres's statements, round trips, commit; the machine's other load",
                      round(server_us, 1), round(1 - bulk / bulk_python, 2)],
                     ["total", round(1e6 / bulk, 1), 1.0]]
                    + ([["Postgres's backend CPU (measured; overlaps the above)", round(bulk_cpu, 1), ""]]
                       if bulk_cpu is not None else [])})
    write(args.json, "outbox", results, facts=facts)
    if PROBLEMS:
        raise SystemExit(f"{len(PROBLEMS)} check(s) failed: " + "; ".join(PROBLEMS))



if __name__ == "__main__":
    main()
