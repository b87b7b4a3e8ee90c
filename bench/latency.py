"""Latency benchmark: from the app's COMMIT to the request's arrival at the Cloud API, beside the peers' job start.

    .venv/bin/python bench/latency.py [--rates 50,500] [--seconds 20] [--quick] [--skip-peers] [--json PATH]

A steady stream, one message (or job) every 1/rate seconds, for --seconds at each rate; each system drains it while
it comes. Reported per system and rate: p50 / p99 / max of the latency, over the messages after the first second
(the first second warms connections and caches; its messages are left out of the figures, never out of the checks).
- wa-outbox, SQL: the app's own transaction, `SELECT wa_outbox.enqueue(...)` then COMMIT (psycopg), the clock read
  right after COMMIT returns; the end is the request's arrival at the Graph API simulator (its own record of
  `received_at`, a process of its own). Two `worker.py` processes, default settings but the sender's rate
  (WA_OUTBOX_RATE_LIMIT_MPS=1000, a sender at Meta's higher throughput: the default 80/s would pace a 500/s stream);
  each message to a customer of its own (per-customer order and pair pacing never hold one back).
- wa-outbox, HTTP: `POST /v1/messages` to `wa-outbox web` (gunicorn), the clock read before the request is sent
  (the COMMIT happens inside it: an upper bound of commit-to-arrival), the same workers and simulator.
- pgqueuer (PEER_PGQUEUER): `Queries.enqueue()` on its own connection (one transaction), the clock read when it
  returns; the end is the entrypoint's start in a consumer process (PgQueuer.run, default settings: LISTEN/NOTIFY).
- BullMQ (bench/node/bullmq_latency.mjs, installed from npm into build/bench-node/): `Queue.add()` resolving to a
  Worker's processor starting, producer and worker in processes of their own, Redis on 127.0.0.1:6379 (Debian's
  redis-server; REDIS_URL overrides).
Where wa-outbox's time goes (a table of its own): from each message's timeline, COMMIT to its claim (the claim's
`sending` row), the claim to the send slot it reserved, the slot to the request (`request_at`; a send wakes 4 ms early,
so this can be negative), and the request to its arrival; how many sends were re-slotted (too late for their slot);
and, when the server has pg_stat_statements loaded, the Postgres statements per message of the SQL cases.
The clocks: every process reads the machine's wall clock (time.time(), performance.timeOrigin + performance.now()).
Goal (issue 22): wa-outbox's p99 at or below the best peer's at each rate, and <= 20 ms at 50/s.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import add_json_argument, write  # noqa: E402
from bench.outbox import SENDER, TOKEN, Simulator, machine_facts, scratch_database, server_url, wa_setup  # noqa: E402

SPAWN = multiprocessing.get_context("spawn")
WORKERS = 2
SENDER_MPS = 1000
API_TOKEN = "bench-latency-token-0123456789"
NODE_DIR = ROOT / "build" / "bench-node"
WARMUP_SECONDS = 1.0
PENDING = "SELECT count(*) FROM wa_outbox.notifications WHERE status IN ('queued', 'sending')"


def percentiles(latencies_ms: list[float]) -> dict[str, float]:
    values = sorted(latencies_ms)
    if not values:
        return {"n": 0}

    def at(q: float) -> float:
        return values[min(len(values) - 1, int(len(values) * q))]
    return {"n": len(values), "p50": at(0.5), "p99": at(0.99), "max": values[-1]}


def steady(rate: float, n: int, each: Any, *, lanes: int = 1) -> list[float]:
    """Call each(i) for i < n at start + i/rate, from `lanes` threads (lane k takes i = k mod lanes); returns the
    times each() returned, indexed by i. A lane that falls behind catches up without sleeping."""
    start = time.monotonic() + 0.2
    out = [0.0] * n

    def lane(k: int) -> None:
        for i in range(k, n, lanes):
            wait = start + i / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            out[i] = each(i)
    threads = [threading.Thread(target=lane, args=(k,)) for k in range(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def figures(starts: dict[Any, float], ends: dict[Any, float], first: float) -> tuple[dict[str, float], int]:
    """Latency percentiles (ms) of the items after the warm-up second; and how many items never ended."""
    missing = sum(1 for k in starts if k not in ends)
    lat = [(ends[k] - t) * 1000 for k, t in starts.items() if k in ends and t >= first + WARMUP_SECONDS]
    result = percentiles(lat)
    span = max(starts.values()) - first
    # what the producer reached: a loaded machine may fall short of the rate asked for (then say so, not hide it)
    result["offered_rate"] = round((len(starts) - 1) / span, 1) if span > 0 else None
    return result, missing


# --- wa-outbox ---------------------------------------------------------------------------------------------------

def _env(url: str, sim: Simulator) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    env.update(DATABASE_URL=url, WHATSAPP_ACCESS_TOKEN=TOKEN, WHATSAPP_PHONE_NUMBER_ID=SENDER,
               WHATSAPP_API_BASE_URL=sim.base_url, WHATSAPP_APP_SECRET="bench-app-secret",
               WHATSAPP_VERIFY_TOKEN="bench-verify", WA_OUTBOX_API_TOKENS=API_TOKEN,
               WA_OUTBOX_RATE_LIMIT_MPS=str(SENDER_MPS), LOG_LEVEL="WARNING")
    return env


def _wait_for(what: str, ok: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {seconds:.0f} s")
        time.sleep(0.1)


def wa_outbox_case(server: str, sim: Simulator, rate: float, seconds: float, path: str,
                   offset: int) -> dict[str, Any]:
    n = int(rate * seconds)
    sim.reset()
    with scratch_database(server, f"latency_{path}") as url:
        wa_setup(url)
        counting = _reset_statements(url)  # per-statement costs when the server has pg_stat_statements loaded
        env = _env(url, sim)
        procs = [subprocess.Popen([sys.executable, "worker.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
                 for _ in range(WORKERS)]
        web = None
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                _wait_for("the workers' start", lambda: conn.execute(
                    "SELECT count(*) FROM wa_outbox.workers").fetchone()[0] >= WORKERS)
            if path == "http":
                port = _free_port()
                web = subprocess.Popen([sys.executable, "-m", "wa_outbox.cli", "web", "--port", str(port)],
                                       cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                base = f"http://127.0.0.1:{port}"
                _wait_for("the web's start", lambda: _answers(f"{base}/readyz"))
                starts = _http_stream(base, rate, n, offset)
            else:
                starts = _sql_stream(url, rate, n, offset)
            with psycopg.connect(url, autocommit=True) as conn:
                _wait_for("the drain", lambda: conn.execute(PENDING).fetchone()[0] == 0, seconds * 3 + 60)
                statements = _statements(conn, n) if counting else None
                messages = requests.get(f"{sim.url}/_admin/messages", timeout=60).json()["messages"]
                ends = {int(m["biz_opaque_callback_data"]): m["received_at"] for m in messages}
                stages = _stages(conn, starts, ends, min(starts.values()))
        finally:
            for p in [*procs, *([web] if web else [])]:
                p.terminate()
            for p in [*procs, *([web] if web else [])]:
                p.wait(30)
    result, missing = figures(starts, ends, min(starts.values()))
    return {**result, "missing": missing, "messages": n, "stages_ms": stages,
            **({"statements": statements} if statements else {})}


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _sql_stream(url: str, rate: float, n: int, offset: int) -> dict[int, float]:
    """The app's own transactions, one per message: enqueue, COMMIT, then the clock. Eight lanes, each a connection
    of its own (as an app's pool): one connection's COMMIT waits for its WAL flush, which alone caps a lane near
    150/s here and would leave 500/s unoffered."""
    ids: dict[int, float] = {}
    local = threading.local()
    opened: list[psycopg.Connection] = []

    def one(i: int) -> float:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = psycopg.connect(url)
            opened.append(conn)
        row = conn.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb)",
                           (f"+55119{offset + i:08d}", '{"type": "text", "text": {"body": "latency"}}')).fetchone()
        conn.commit()
        t = time.time()
        ids[row[0]] = t
        return t
    try:
        steady(rate, n, one, lanes=8 if rate > 100 else 1)
    finally:
        for conn in opened:
            conn.close()
    return ids


def _http_stream(base: str, rate: float, n: int, offset: int) -> dict[int, float]:
    """POST /v1/messages, the clock read before each request (four client threads: one is GIL-bound near 1,000/s)."""
    ids: dict[int, float] = {}
    local = threading.local()

    def one(i: int) -> float:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
            session.headers["Authorization"] = f"Bearer {API_TOKEN}"
        t = time.time()
        answer = session.post(f"{base}/v1/messages", json={
            "to": f"+55119{offset + i:08d}", "message": {"type": "text", "text": {"body": "latency"}}}, timeout=30)
        answer.raise_for_status()
        ids[answer.json()["id"]] = t
        return t
    steady(rate, n, one, lanes=16 if rate > 100 else 4)
    return ids


TIMELINE = """
SELECT DISTINCT ON (n.id) n.id, extract(epoch FROM s.created_at)::float8 AS claimed,
       coalesce((t.detail->>'send_at')::float8, (s.detail->>'send_at')::float8) AS slot,
       (t.detail->>'request_at')::float8 AS request_at, coalesce(t.detail ? 'send_at', false) AS reslotted
FROM wa_outbox.notifications n
JOIN wa_outbox.notification_events s ON s.notification_id = n.id AND s.event = 'sending'
LEFT JOIN wa_outbox.notification_events t ON t.notification_id = n.id AND t.event = 'sent'
ORDER BY n.id, s.id DESC
"""
# Where a message's time goes, from the clocks each part keeps: the app's (COMMIT returned), the claim's (its
# `sending` timeline row, written as the claim statement ends: clock_timestamp()), the send slot the claim reserved
# (or the one a late send was re-slotted to), the worker's (the request went: `request_at` on the `sent` row) and the
# simulator's (arrival).
STAGES = (("COMMIT to claim", "commit", "claimed"), ("claim to send slot", "claimed", "slot"),
          ("send slot to request", "slot", "request_at"), ("request to arrival", "request_at", "arrival"))


def _stages(conn: psycopg.Connection, starts: dict[Any, float], ends: dict[Any, float],
            first: float) -> dict[str, Any]:
    """p50 / p99 (ms) of each stage of STAGES over the messages after the warm-up second, and how many were
    re-slotted (their request would have gone too late for their slot: worker/_sender.py late_send_limit)."""
    points: dict[str, list[float]] = {name: [] for name, _, _ in STAGES}
    reslotted = 0
    for id_, claimed, slot, request_at, moved in conn.execute(TIMELINE).fetchall():
        reslotted += bool(moved)
        commit = starts.get(id_)
        if commit is None or commit < first + WARMUP_SECONDS:
            continue
        at = {"commit": commit, "claimed": claimed, "slot": slot, "request_at": request_at, "arrival": ends.get(id_)}
        for name, a, b in STAGES:
            if at[a] is not None and at[b] is not None:
                points[name].append((at[b] - at[a]) * 1000)
    out: dict[str, Any] = {name: {k: round(v, 2) for k, v in percentiles(vals).items() if k in ("p50", "p99")}
                           for name, vals in points.items()}
    out["reslotted"] = reslotted
    return out


def _statements(conn: psycopg.Connection, n: int) -> list[dict[str, Any]] | None:
    """This database's statements per message (calls, Postgres ms) from pg_stat_statements, when the server has it
    loaded (None otherwise): the claim's calls per message say how often a worker claimed for nothing."""
    from bench.capacity import statement_costs, statement_names
    try:
        return statement_costs(conn, statement_names(), n)[:8]
    except psycopg.Error:
        return None


def _reset_statements(url: str) -> bool:
    from bench.capacity import statements_available
    with psycopg.connect(url, autocommit=True) as conn:
        return statements_available(conn) is None


# --- pgqueuer ----------------------------------------------------------------------------------------------------

def _pgqueuer_consumer(url: str, ready: Any, stop: Any, pipe: Any) -> None:
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver

    async def main() -> None:
        started: dict[int, float] = {}
        pgq = PgQueuer(AsyncpgDriver(await asyncpg.connect(url)))

        @pgq.entrypoint("latency")
        async def latency(job: Any) -> None:
            started[int(job.payload)] = time.time()

        async def stopper() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.05)
            pgq.shutdown.set()
        runner = asyncio.ensure_future(pgq.run())
        await asyncio.sleep(0.5)
        ready.set()
        await stopper()
        await runner
        pipe.send(started)
    asyncio.run(main())


def pgqueuer_case(server: str, rate: float, seconds: float) -> dict[str, Any]:
    n = int(rate * seconds)
    with scratch_database(server, "latency_pgqueuer") as url:
        async def install() -> None:
            import asyncpg
            from pgqueuer import Queries
            from pgqueuer.db import AsyncpgDriver
            conn = await asyncpg.connect(url)
            await Queries(AsyncpgDriver(conn)).install()
            await conn.close()
        asyncio.run(install())
        ready, stop = SPAWN.Event(), SPAWN.Event()
        parent, child = SPAWN.Pipe()
        consumer = SPAWN.Process(target=_pgqueuer_consumer, args=(url, ready, stop, child), daemon=True)
        consumer.start()
        if not ready.wait(60):
            raise SystemExit("the pgqueuer consumer did not start")
        starts = asyncio.run(_pgqueuer_stream(url, rate, n))
        with psycopg.connect(url, autocommit=True) as conn:
            _wait_for("pgqueuer's drain", lambda: conn.execute(
                "SELECT count(*) FROM pgqueuer").fetchone()[0] == 0, seconds * 3 + 60)
        stop.set()
        ends = parent.recv() if parent.poll(60) else {}
        consumer.join(30)
    result, missing = figures(starts, ends, min(starts.values()))
    return {**result, "missing": missing, "messages": n}


async def _pgqueuer_stream(url: str, rate: float, n: int) -> dict[int, float]:
    import asyncpg
    from pgqueuer import Queries
    from pgqueuer.db import AsyncpgDriver
    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    starts: dict[int, float] = {}
    begin = time.monotonic() + 0.2
    for i in range(n):
        wait = begin + i / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        await queries.enqueue("latency", str(i).encode())
        starts[i] = time.time()
    await conn.close()
    return starts


# --- BullMQ ------------------------------------------------------------------------------------------------------

def bullmq_ready() -> str | None:
    """None when BullMQ can run here, else why not."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node and npm are not installed"
    try:
        import socket
        host, port = _redis_address()
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return "no Redis answers on REDIS_URL (apt-get install redis-server)"
    if not (NODE_DIR / "node_modules" / "ioredis").exists():
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "bench" / "node" / "package.json", NODE_DIR / "package.json")
        done = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund"], cwd=NODE_DIR,
                              capture_output=True, text=True)
        if done.returncode != 0:
            return f"npm install bullmq failed: {done.stderr.strip()[-200:]}"
    shutil.copy(ROOT / "bench" / "node" / "bullmq_latency.mjs", NODE_DIR / "bullmq_latency.mjs")
    return None


def _redis_address() -> tuple[str, int]:
    from urllib.parse import urlsplit
    parts = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    return parts.hostname or "127.0.0.1", parts.port or 6379


def _node_lines(proc: subprocess.Popen, last: str) -> dict[int, float]:
    out: dict[int, float] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.strip()
        if line == last:
            break
        i, t = line.split()
        out[int(i)] = float(t) / 1000
    return out


def bullmq_case(rate: float, seconds: float) -> dict[str, Any]:
    n = int(rate * seconds)
    queue = f"wa-outbox-latency-{os.getpid()}-{int(rate)}"
    script = str(NODE_DIR / "bullmq_latency.mjs")
    worker = subprocess.Popen(["node", script, "worker", queue, "10"], cwd=NODE_DIR, stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None
    if worker.stdout.readline().strip() != "ready":
        raise SystemExit("the BullMQ worker did not start")
    producer = subprocess.run(["node", script, "producer", queue, str(rate), str(n)], cwd=NODE_DIR,
                              capture_output=True, text=True, timeout=seconds * 3 + 60)
    starts = {int(i): float(t) / 1000 for i, t in (line.split() for line in producer.stdout.splitlines()
                                                     if line and line != "done")}
    time.sleep(1.0)  # the last jobs' start (a drained BullMQ queue has nothing to count it by)
    worker.terminate()
    ends = _node_lines(worker, "end")
    worker.wait(30)
    result, missing = figures(starts, ends, min(starts.values()))
    return {**result, "missing": missing, "messages": n}


# --- the run -----------------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="50,500")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true", help="5 s per rate")
    parser.add_argument("--skip-peers", action="store_true")
    add_json_argument(parser)
    args = parser.parse_args()
    seconds = 5.0 if args.quick else args.seconds
    rates = [float(r) for r in args.rates.split(",")]
    server = server_url()
    facts = machine_facts(server)
    print(f"# latency: commit to arrival, {seconds:g} s at each of {', '.join(f'{r:g}/s' for r in rates)}; {facts}",
          flush=True)
    results: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    why_no_bullmq = None if args.skip_peers else bullmq_ready()
    sim = Simulator()
    try:
        offset = 0
        for rate in rates:
            for system in ("wa-outbox SQL", "wa-outbox HTTP", "pgqueuer", "BullMQ"):
                key = f"{system} @ {rate:g}/s"
                if system in ("pgqueuer", "BullMQ") and args.skip_peers:
                    continue
                if system == "BullMQ" and why_no_bullmq:
                    print(f"{key}: skipped ({why_no_bullmq})", flush=True)
                    continue
                if system == "pgqueuer":
                    figures_ = pgqueuer_case(server, rate, seconds)
                elif system == "BullMQ":
                    figures_ = bullmq_case(rate, seconds)
                else:
                    figures_ = wa_outbox_case(server, sim, rate, seconds, system.split()[1].lower(), offset)
                offset += int(rate * seconds)
                results[key] = figures_
                if figures_.get("missing"):
                    problems.append(f"{key}: {figures_['missing']} never arrived")
                stages = (", " + "; ".join(f"{name} p50 {v.get('p50')} p99 {v.get('p99')} ms" for name, v in
                                           figures_["stages_ms"].items() if isinstance(v, dict))
                          + f"; re-slotted {figures_['stages_ms']['reslotted']}") if "stages_ms" in figures_ else ""
                print(f"{key:<24} p50 {figures_.get('p50', float('nan')):7.1f} ms  p99 "
                      f"{figures_.get('p99', float('nan')):7.1f} ms  max {figures_.get('max', float('nan')):7.1f} ms"
                      f"  (n={figures_.get('n')}, offered {figures_.get('offered_rate')}/s{stages})", flush=True)
    finally:
        sim.stop()
    headline = []
    for rate in rates:
        ours = results.get(f"wa-outbox SQL @ {rate:g}/s", {}).get("p99")
        peers = {name: results[f"{name} @ {rate:g}/s"]["p99"] for name in ("pgqueuer", "BullMQ")
                 if f"{name} @ {rate:g}/s" in results and "p99" in results[f"{name} @ {rate:g}/s"]}
        best = min(peers.items(), key=lambda kv: kv[1]) if peers else None
        goal_ms = 20.0 if rate <= 50 else None
        met = ours is not None and (best is None or ours <= best[1]) and (goal_ms is None or ours <= goal_ms)
        headline.append({
            "what": f"latency: COMMIT to arrival at the Cloud API, p99 at {rate:g}/s (SQL enqueue)", "unit": "ms",
            "value": round(ours, 1) if ours is not None else None,
            "reference": round(best[1], 1) if best else None,
            "reference_name": f"{best[0]} job start after commit, p99" if best else "no peer measured",
            "ratio": round(ours / best[1], 3) if ours and best else None,
            "goal": "<= the best peer" + (" and <= 20 ms" if goal_ms else ""), "met": met})
    rows = [[key, r.get("n"), *(round(r[k], 1) if k in r else None for k in ("p50", "p99", "max"))]
            for key, r in results.items()]
    ours = {key: r for key, r in results.items() if "stages_ms" in r}
    where = [[key, *(r["stages_ms"][name].get(q) for name, _, _ in STAGES for q in ("p50", "p99")),
              r["stages_ms"]["reslotted"]] for key, r in ours.items()]
    tables = [{"title": "Latency from COMMIT (or add) to arrival (or job start)",
               "columns": ["system @ rate", "messages", "p50 ms", "p99 ms", "max ms"], "rows": rows},
              {"title": "Where wa-outbox's time goes: each stage's p50 / p99 (ms), from the clocks each part keeps "
                        "(HTTP: the COMMIT inside the request, so its first stage starts when the request is sent)",
               "columns": ["case", *(f"{name} {q}" for name, _, _ in STAGES for q in ("p50", "p99")),
                           "re-slotted"], "rows": where}]
    tables += [{"title": f"Postgres statements per message, {key} (pg_stat_statements: executor and planner ms)",
                "columns": ["statement", "calls per message", "ms per message"],
                "rows": [[st["statement"], st["calls_per_message"], st["ms_per_message"]] for st in r["statements"]]}
               for key, r in ours.items() if r.get("statements") and key.startswith("wa-outbox SQL")]
    write(args.json, "latency", {
        "seconds_per_rate": seconds, "rates": rates, "workers": WORKERS, "sender_mps": SENDER_MPS,
        "results": results, "problems": problems, "headline": headline, "tables": tables,
    }, facts=facts)
    for h in headline:
        print(f"{h['what']}: {h['value']} ms beside {h['reference_name']} {h['reference']} ms "
              f"({'met' if h['met'] else 'NOT met'}: {h['goal']})")
    if problems:
        print("CHECK FAILED: " + "; ".join(problems))
        sys.exit(1)


if __name__ == "__main__":
    main()
