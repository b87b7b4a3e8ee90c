"""Capacity benchmark: what one Postgres carries with everything running at once, stepped up to its ceiling.

    .venv/bin/python bench/capacity.py [--rates 25,35,50,70,...] [--step-seconds 30] [--quick] [--keep DIR]
        [--json PATH]

On real Postgres (DATABASE_URL, else the embedded one) in a scratch database: the web under gunicorn (the service's
settings, an access log of every answer's duration), 2 worker processes (`worker.py`, default settings but two:
WA_OUTBOX_RATE_LIMIT_MPS=1000, a number at Meta's higher throughput, and WA_OUTBOX_WORKER_CONCURRENCY=64, so that
sends in flight for 100-300 ms each do not cap the rate below what Postgres carries), the Graph API simulator
answering each send after 100-300 ms and posting sent, delivered and read for each message back to the web (a third
of them batched in one POST, as Meta batches), and one endpoint (bench/receivers.py) receiving every event. Meanwhile,
at each rate of --rates in turn, for --step-seconds:
- apps enqueue at that rate in their own transactions, a third each through the SQL function `wa_outbox.enqueue`,
  Python `wa_outbox.enqueue` and `POST /v1/messages`;
- `/metrics` is scraped every 15 s and the ops page read every 5 s (a logged-in session);
- every second: the age of the oldest due queued message, the database's connections.
A step holds when the oldest due message stays under 1 s old (its worst second in the step's second half, the first
being the ramp) and the web answers the simulator's status webhooks within 50 ms at p99; the last rate that held is
the ceiling. Beside it, in the same run: the full drain alone (the same processes and simulator, N messages
enqueued up front, nothing else running), the ceiling's goal being >= 0.6 of it. Per message at each step: the
Postgres CPU milliseconds of this database's backends (from /proc: the server must be on this machine), split by
the backends' application_name into web, workers and the apps' own enqueues; the CPU milliseconds of the web
processes, the worker processes, the endpoint's receiver and this process (the simulator, the load, the readers);
the WAL bytes (pg_current_wal_lsn: the whole server's, so a quiet server is assumed). "The deployment's" CPU per
message is Postgres (the whole server's CPU when it can be read: the backends a pool closed during a step are in it,
under a line of their own) + web + workers: what a deployment would spend with Meta and the app on other machines.
`--keep DIR` keeps the logs (the web's access log: every answer's duration).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg
import requests
from urllib3.util.retry import Retry

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._results import add_json_argument, write  # noqa: E402
from bench.chaos import read_access_log  # noqa: E402
from bench.outbox import machine_facts, scratch_database, server_url, wa_setup  # noqa: E402
from wa_outbox import enqueue  # noqa: E402
from wa_outbox.secret_box import SecretBox, fingerprint, generate_key  # noqa: E402
from wa_outbox.simulator import SimulatorServer  # noqa: E402

SENDER = "100000000000001"
SECRET = "capacity-app-secret"
API_TOKEN = "capacity-api-token-0123456789"
ACCESS = "capacity-access-token"
WORKERS = 2
CONCURRENCY = 64  # sends in flight per worker: 2 x 64 / 0.2 s = 640/s before Postgres is asked
SENDER_MPS = 1000
RATES = (25, 35, 50, 70, 100, 140, 200, 300, 400, 600)  # about x1.4 a step: the ceiling within 40 %
QUEUE_AGE_LIMIT = 1.0   # seconds: the oldest due message in a step's steady half
WEBHOOK_P99_LIMIT = 0.050  # seconds: the web's answer to the simulator's status webhooks
DRAIN_N = 3000
MESSAGE = {"type": "text", "text": {"body": "capacity"}}
OLDEST_DUE = ("SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) FROM wa_outbox.notifications "
              "WHERE status = 'queued' AND next_attempt_at <= now()")
SESSIONS = "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"  # connections opened so far
PENDING = "SELECT count(*) FROM wa_outbox.notifications WHERE status IN ('queued', 'sending')"
# What an earlier phase may leave in flight: messages to send, status webhooks stored but not applied, events not
# yet delivered to the endpoint.
UNSETTLED = ("SELECT (SELECT count(*) FROM wa_outbox.notifications WHERE status IN ('queued', 'sending'))"
             " + (SELECT count(*) FROM wa_outbox.webhook_events WHERE status IN ('queued', 'processing'))"
             " + (SELECT count(*) FROM wa_outbox.deliveries WHERE status IN ('queued', 'delivering'))")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(ok: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            raise SystemExit(f"capacity: {what} did not happen within {seconds:.0f} s")
        time.sleep(0.2)


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def backend_cpu_seconds(conn: psycopg.Connection, database: str) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of each backend connected to `database`, with its application_name
    (wa-outbox-web, wa-outbox-worker, wa-outbox-listener, …; the apps' enqueues are capacity-app)."""
    out = {}
    for pid, name in conn.execute("SELECT pid, application_name FROM pg_stat_activity WHERE datname = %s",
                                  (database,)):
        cpu = proc_cpu_seconds(pid)
        if cpu >= 0:
            out[pid] = (name or "?", cpu)
    return out


def server_cpu_seconds(conn: psycopg.Connection) -> float:
    """CPU seconds of the whole Postgres server so far: every process under the postmaster (backends, WAL writer,
    checkpointer, …) and, through the postmaster's children times, every backend that has exited (a connection
    closed by a pool between two readings is otherwise lost to a per-backend count). -1 when the server is not on
    this machine."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    try:
        postmaster = psutil.Process(psutil.Process(pid).ppid())
        own = postmaster.cpu_times()
        return (own.user + own.system + own.children_user + own.children_system
                + sum(max(0.0, proc_cpu_seconds(c.pid)) for c in postmaster.children()))
    except psutil.Error:
        return -1.0


def proc_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` (-1: gone, or not on this machine)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return -1.0
    return times.user + times.system


POSTGRES_REST = ("Postgres: backends closed during the step, and the server's own processes (WAL writer, "
                 "autovacuum, ...)")
# Postgres CPU by the application_name of the backend (db.create_engine's, wa_outbox/worker/__init__.py's).
BACKEND_STAGES = {"wa-outbox-web": "web (status webhooks, POST /v1/messages, reads)",
                  "wa-outbox-web-registry": "web (status webhooks, POST /v1/messages, reads)",
                  "wa-outbox-worker": "workers (claim, record, statuses, events)",
                  "wa-outbox-listener": "workers (claim, record, statuses, events)",
                  "wa-outbox-event-notices": "workers (claim, record, statuses, events)",
                  "wa-outbox-media": "workers (claim, record, statuses, events)",
                  "capacity-app": "apps' SQL and Python enqueue"}


def statement_names() -> dict[str, str]:
    """The first line of each of wa_outbox/sql/*.sql (its header comment, kept by pg_stat_statements at the start
    of the statement's text) → the file's name."""
    names = {}
    for path in sorted((ROOT / "wa_outbox" / "sql").glob("*.sql")):
        first = path.read_text(encoding="utf-8").lstrip().splitlines()[0] if path.stat().st_size else ""
        if first.startswith("--") and path.stem != "schema":
            names.setdefault(placeholders_out(first), path.stem)
    return names


def placeholders_out(line: str) -> str:
    """A statement's first line without its placeholders: psycopg sends `%(name)s` as `$n`, which
    pg_stat_statements keeps, and it replaces constants with `$n` too."""
    return re.sub(r"%\(\w+\)s|\$\d+", "$", line.strip())


def statements_available(conn: psycopg.Connection) -> str | None:
    """None when pg_stat_statements answers on this server (it must be in shared_preload_libraries), else why not."""
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
    except psycopg.Error as exc:
        return " ".join(str(exc).split())[:200]
    return None


def statement_costs(conn: psycopg.Connection, names: dict[str, str], per: int) -> list[dict[str, Any]]:
    """Since the last reset, this database's statements grouped by SQL file (else the text's start): executor and
    planner milliseconds and calls per message, most costly first."""
    rows = conn.execute(
        "SELECT query, calls, total_exec_time, total_plan_time, plans FROM pg_stat_statements "
        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())").fetchall()
    grouped: dict[str, list[float]] = {}
    for query, calls, exec_ms, plan_ms, plans in rows:
        first = query.lstrip().splitlines()[0].strip() if query.strip() else ""
        name = names.get(placeholders_out(first)) or " ".join(query.split())[:60]
        entry = grouped.setdefault(name, [0.0, 0.0, 0.0, 0.0])
        entry[0] += exec_ms
        entry[1] += plan_ms
        entry[2] += calls
        entry[3] += plans  # counted with pg_stat_statements.track_planning on, else 0
    return [{"statement": name, "ms_per_message": round((e + p) / per, 4), "calls_per_message": round(c / per, 3),
             "plans_per_call": round(n / c, 3) if c else None}
            for name, (e, p, c, n) in sorted(grouped.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))]


def process_cpu_seconds(processes: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds (user + system) of each group of processes and their children (gunicorn's workers); this
    process itself (the simulator's threads, the load, the readers) without its children, which are the others."""
    out: dict[str, float] = {}
    for group, pids in processes.items():
        total = 0.0
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                for p in [proc, *(proc.children(recursive=True) if pid != os.getpid() else [])]:
                    times = p.cpu_times()
                    total += times.user + times.system
            except psutil.Error:
                continue
        out[group] = total
    return out


class Stack:
    """The web, the workers, the simulator and the endpoint's receiver, on one scratch database."""

    def __init__(self, url: str, directory: Path) -> None:
        self.url, self.directory = url, directory
        self.database = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        self.web_port = free_port()
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.access_log = directory / "access.log"
        self.sim = SimulatorServer(access_token=ACCESS, app_secret=SECRET,
                                   webhook_url=f"{self.web_url}/webhooks/whatsapp",
                                   faults=[{"mode": "latency", "ms": 100, "jitter_ms": 200}], seed=3,
                                   validate=False, batch_rate=0.33, webhook_max_batch=20).start()
        key = generate_key()
        secret = "whsec_" + base64.b64encode(os.urandom(24)).decode("ascii")
        port = free_port()
        self.receiver = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "receivers.py"), "--port", str(port),
             "--log", str(directory / "receiver.jsonl")], env={**os.environ, "RECEIVER_SECRET": secret},
            stdout=subprocess.PIPE, text=True)
        assert self.receiver.stdout is not None
        if self.receiver.stdout.readline().strip() != "listening":
            raise SystemExit("capacity: the receiver did not start")
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO wa_outbox.endpoints (id, url, description, event_types, ordered, secret_enc, "
                         "secret_fingerprint) VALUES ('ep_capacity', %s, 'capacity: every event', NULL, false, %s, %s)",
                         (f"http://127.0.0.1:{port}/events", SecretBox([key]).encrypt(secret), fingerprint(secret)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
        env.update(DATABASE_URL=url, WHATSAPP_APP_SECRET=SECRET, WHATSAPP_VERIFY_TOKEN="capacity-verify",
                   WA_OUTBOX_API_TOKENS=API_TOKEN, WHATSAPP_ACCESS_TOKEN=ACCESS, WHATSAPP_PHONE_NUMBER_ID=SENDER,
                   WHATSAPP_API_BASE_URL=self.sim.base_url, WA_OUTBOX_RATE_LIMIT_MPS=str(SENDER_MPS),
                   WA_OUTBOX_SECRET_KEY=key, WA_OUTBOX_WORKER_CONCURRENCY=str(CONCURRENCY),
                   WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE="true", LOG_LEVEL="WARNING",
                   WA_OUTBOX_BIND=f"127.0.0.1:{self.web_port}", CHAOS_ACCESS_LOG=str(self.access_log))
        self.env = env
        self.statement_names = statement_names()
        with psycopg.connect(url, autocommit=True) as conn:
            self.statements = statements_available(conn)  # None: per-statement costs from pg_stat_statements
        self.logs = [open(directory / name, "a") for name in ("web.log", "workers.log")]
        self.web = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config", "python:bench.chaos_gunicorn",
                                     "wsgi:app"], cwd=ROOT, env=env, stdout=self.logs[0], stderr=subprocess.STDOUT)
        self.workers = [subprocess.Popen([sys.executable, "worker.py"], cwd=ROOT, env=env, stdout=self.logs[1],
                                         stderr=subprocess.STDOUT) for _ in range(WORKERS)]
        wait(lambda: answers(f"{self.web_url}/readyz"), 60, "the web's start")
        with psycopg.connect(url, autocommit=True) as conn:
            wait(lambda: conn.execute("SELECT count(*) FROM wa_outbox.workers").fetchone()[0] >= WORKERS, 60,
                 "the workers' start")

    def processes(self) -> dict[str, list[int]]:
        return {"web processes": [self.web.pid], "worker processes": [w.pid for w in self.workers],
                "the app's endpoint (bench/receivers.py)": [self.receiver.pid],
                "simulator, load and readers (this process)": [os.getpid()]}

    def stop(self) -> None:
        for p in [*self.workers, self.web, self.receiver]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in [*self.workers, self.web, self.receiver]:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        self.sim.stop()
        for handle in self.logs:
            handle.close()


class Load:
    """Enqueue at `rate` for `seconds`, a third each by SQL, Python and HTTP, each message its own transaction."""

    def __init__(self, stack: Stack, rate: float, seconds: float, offset: int) -> None:
        self.stack, self.rate, self.seconds, self.offset = stack, rate, seconds, offset
        self.n = int(rate * seconds)
        self.errors: list[str] = []
        self.backend_cpu = 0.0  # CPU seconds of the lanes' own backends (the apps' SQL and Python enqueue)

    def run(self) -> None:
        start = time.monotonic() + 0.1
        lanes = [threading.Thread(target=self._lane, args=(way, start)) for way in range(3)]
        for t in lanes:
            t.start()
        for t in lanes:
            t.join()

    def _lane(self, way: int, start: float) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {API_TOKEN}"
        with psycopg.connect(self.stack.url, application_name="capacity-app") as conn:
            for i in range(way, self.n, 3):
                wait_s = start + i / self.rate - time.monotonic()
                if wait_s > 0:
                    time.sleep(wait_s)
                to = f"+55119{self.offset + i:08d}"
                try:
                    if way == 0:
                        conn.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb)", (to, '{"type": "text", "text": '
                                                                                  '{"body": "capacity"}}'))
                        conn.commit()
                    elif way == 1:
                        enqueue(conn, to=to, message=MESSAGE)
                        conn.commit()
                    else:
                        session.post(f"{self.stack.web_url}/v1/messages", json={"to": to, "message": MESSAGE},
                                     timeout=30).raise_for_status()
                except Exception as exc:  # noqa: BLE001 - counted and reported, never hidden
                    conn.rollback()
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            # this lane's backend, read before it closes (the step's before/after readings never see it)
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            conn.rollback()
            self.backend_cpu += max(0.0, proc_cpu_seconds(pid))


class Readers:
    """/metrics every 15 s, the ops page every 5 s, as a Prometheus and an operator would."""

    def __init__(self, stack: Stack) -> None:
        self.stack, self.stop = stack, threading.Event()
        self.reads = {"metrics": 0, "ops": 0}
        self.errors: list[str] = []
        self.spans: list[tuple[str, float, float]] = []  # (what, start, end) of each read, wall clock
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # The web closes a keep-alive connection idle for 5 s (gunicorn_conf.keepalive), just as this reader comes
        # back to it: a GET on a connection closed under it is retried, as a browser or Prometheus would.
        retry = requests.adapters.HTTPAdapter(max_retries=Retry(total=2, allowed_methods={"GET"}, backoff_factor=0))
        ops = requests.Session()
        ops.mount("http://", retry)
        scraper = requests.Session()
        scraper.mount("http://", retry)
        page = ops.get(f"{self.stack.web_url}/ops/login", timeout=10).text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
        ops.post(f"{self.stack.web_url}/ops/login", data={"token": API_TOKEN, **({"csrf_token": csrf[1]} if csrf
                                                                               else {})}, timeout=10)
        tick = 0
        while not self.stop.wait(0 if tick == 0 else 5.0):
            try:
                if tick % 3 == 0:
                    started = time.time()
                    scraper.get(f"{self.stack.web_url}/metrics", timeout=30).raise_for_status()
                    self.reads["metrics"] += 1
                    self.spans.append(("metrics", started, time.time()))
                started = time.time()
                ops.get(f"{self.stack.web_url}/ops", timeout=30).raise_for_status()
                self.reads["ops"] += 1
                self.spans.append(("ops", started, time.time()))
            except requests.RequestException as exc:  # counted and reported: a step with a failed read fails
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            tick += 1


def step(stack: Stack, readers: Readers, rate: float, seconds: float, offset: int) -> dict[str, Any]:
    load = Load(stack, rate, seconds, offset)
    read_errors = len(readers.errors)
    samples: list[tuple[float, float, int]] = []  # (t, oldest due age, connections)
    with psycopg.connect(stack.url, autocommit=True) as conn:
        if stack.statements is None:
            conn.execute("SELECT pg_stat_statements_reset()")
        cpu0 = backend_cpu_seconds(conn, stack.database)
        proc0 = process_cpu_seconds(stack.processes())
        wal0 = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        server0 = server_cpu_seconds(conn)
        sessions0 = conn.execute(SESSIONS).fetchone()[0]  # type: ignore[index]
        sent0 = conn.execute("SELECT count(*) FROM wa_outbox.notifications WHERE sent_at IS NOT NULL").fetchone()[0]
        t0 = time.time()
        runner = threading.Thread(target=load.run)
        runner.start()
        while runner.is_alive():
            samples.append((time.time() - t0, float(conn.execute(OLDEST_DUE).fetchone()[0]),
                            conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                         (stack.database,)).fetchone()[0]))
            runner.join(1.0)
        t1 = time.time()
        cpu1 = backend_cpu_seconds(conn, stack.database)
        proc1 = process_cpu_seconds(stack.processes())
        wal_bytes = conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", (str(wal0),)).fetchone()[0]
        server_cpu = server_cpu_seconds(conn) - server0 if server0 >= 0 else None
        sessions = conn.execute(SESSIONS).fetchone()[0] - sessions0  # type: ignore[index]
        sent = conn.execute("SELECT count(*) FROM wa_outbox.notifications WHERE sent_at IS NOT NULL"
                            ).fetchone()[0] - sent0
        statements = (statement_costs(conn, stack.statement_names, max(1, sent)) if stack.statements is None
                      else [])
    cpu = sum(v - cpu0.get(pid, ("", 0.0))[1] for pid, (_, v) in cpu1.items()) + load.backend_cpu
    per = max(1, sent)
    stages: dict[str, float] = {}
    for pid, (name, v) in cpu1.items():
        stage = "Postgres: " + BACKEND_STAGES.get(name, "other (the bench's own readings)")
        stages[stage] = stages.get(stage, 0.0) + (v - cpu0.get(pid, ("", 0.0))[1]) * 1000 / per
    stages["Postgres: " + BACKEND_STAGES["capacity-app"]] = load.backend_cpu * 1000 / per
    for group, v in proc1.items():
        stages[group] = (v - proc0.get(group, 0.0)) * 1000 / per
    # The whole server's CPU, when known, is Postgres' share: the per-backend readings miss every backend that a
    # pool closed between them (at 70/s, with 2-3 connections opened a second, most of it); the rest goes under
    # its own line so that the stages add up.
    backends = sum(v for k, v in stages.items() if k.startswith("Postgres"))
    if server_cpu is not None and server_cpu * 1000 / per > backends:
        stages[POSTGRES_REST] = server_cpu * 1000 / per - backends
    deployment = sum(v for k, v in stages.items() if k.startswith("Postgres") or k in ("web processes",
                                                                                         "worker processes"))
    posts = [(start, end) for end, status, method, path, start in read_access_log(stack.access_log)
             if method == "POST" and path.startswith("/webhooks/whatsapp") and t0 <= end <= t1]
    hooks = sorted(end - start for start, end in posts)
    # Where the slow answers come from: the same p99 over the POSTs that overlapped no ops page or /metrics read
    spans = [(a, b) for _, a, b in readers.spans if b >= t0 and a <= t1]
    apart = sorted(end - start for start, end in posts if not any(a <= end and start <= b for a, b in spans))
    steady = [age for t, age, _ in samples if t >= seconds / 2]
    p99 = hooks[min(len(hooks) - 1, int(len(hooks) * 0.99))] if hooks else None
    worst_age = max(steady) if steady else 0.0
    held = worst_age < QUEUE_AGE_LIMIT and (p99 is None or p99 < WEBHOOK_P99_LIMIT) and not load.errors
    read_failures = readers.errors[read_errors:]
    held = held and not read_failures
    return {"rate": rate, "messages": load.n, "sent_in_step": sent, "held": held,
            "oldest_due_age_s": round(worst_age, 3), "webhook_posts": len(hooks),
            "webhook_p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
            "webhook_p99_ms_apart_from_reads": (round(apart[min(len(apart) - 1, int(len(apart) * 0.99))] * 1000, 1)
                                                if apart else None),
            "read_ms": {what: round(max((b - a) * 1000 for w, a, b in readers.spans
                                        if w == what and b >= t0 and a <= t1), 1)
                        for what in ("ops", "metrics") if any(w == what and b >= t0 and a <= t1
                                                               for w, a, b in readers.spans)},
            "pg_cpu_ms_per_message": round(cpu * 1000 / max(1, sent), 3),
            "cpu_ms_per_message": {k: round(v, 3) for k, v in sorted(stages.items())},
            "deployment_cpu_ms_per_message": round(deployment, 3),
            "statements": statements[:25],
            "wal_bytes_per_message": round(int(wal_bytes) / max(1, sent)),
            # the whole server's CPU (exited backends too): what a dedicated server spends per message
            "server_cpu_ms_per_message": round(server_cpu * 1000 / max(1, sent), 3) if server_cpu is not None
            else None,
            "connections_opened_per_s": round(sessions / max(0.001, t1 - t0), 1),
            "connections_max": max((c for _, _, c in samples), default=0),
            "enqueue_errors": load.errors[:5], "read_errors": read_failures[:5],
            "age_series": [[round(t, 1), round(a, 3)] for t, a, _ in samples]}


def drain_alone(stack: Stack, n: int, offset: int) -> float:
    """The same processes with nothing else running: n messages enqueued up front, timed until none waits. The
    simulator posts no status webhooks meanwhile (a drain alone, as bench/outbox.py measures one); the events of the
    sends still go to the endpoint."""
    webhook_url = stack.sim.config.webhook_url
    stack.sim.configure(webhook_url=None)
    try:
        with psycopg.connect(stack.url) as conn:
            for start in range(0, n, 1000):
                from wa_outbox import enqueue_many
                enqueue_many(conn, [{"to": f"+55119{offset + i:08d}", "message": MESSAGE}
                                    for i in range(start, min(n, start + 1000))])
            conn.commit()
        started = time.perf_counter()
        with psycopg.connect(stack.url, autocommit=True) as conn:
            wait(lambda: conn.execute(PENDING).fetchone()[0] == 0, 600, "the drain alone")
        return n / (time.perf_counter() - started)
    finally:
        stack.sim.configure(webhook_url=webhook_url)


def settle(stack: Stack, timeout: float = 300.0) -> None:
    """Wait until nothing of the phase before is still in flight (the drain's events still going to the endpoint,
    status webhooks still being posted or applied): the first step then measures its own load, not the drain's
    tail (it failed at 25/s on that tail before)."""
    if not stack.sim.simulator.webhooks.wait_idle(timeout):
        raise SystemExit("capacity: the simulator's status webhooks did not drain")
    with psycopg.connect(stack.url, autocommit=True) as conn:
        wait(lambda: conn.execute(UNSETTLED).fetchone()[0] == 0, timeout, "the stack to settle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--step-seconds", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true", help="rates 25,50, 6 s steps, a 500-message drain")
    parser.add_argument("--keep", type=Path, help="keep the run's logs (web, workers, access log) in this directory")
    add_json_argument(parser)
    args = parser.parse_args()
    # SIGTERM unwinds like ^C: the web, the workers and the receiver are stopped and the scratch database dropped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rates = [25.0, 50.0] if args.quick else [float(r) for r in args.rates.split(",")]
    seconds = 6.0 if args.quick else args.step_seconds
    drain_n = 500 if args.quick else DRAIN_N
    server = server_url()
    facts = machine_facts(server)
    print(f"# capacity: steps of {seconds:g} s at {', '.join(f'{r:g}/s' for r in rates)}; {facts}", flush=True)
    steps: list[dict[str, Any]] = []
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with (contextlib.nullcontext(str(args.keep)) if args.keep else
          tempfile.TemporaryDirectory(prefix="wa-outbox-capacity-")) as tmp, \
            scratch_database(server, "capacity") as url:
        wa_setup(url)
        stack = Stack(url, Path(tmp))
        if stack.statements is not None:
            print(f"# no per-statement costs: pg_stat_statements does not answer here ({stack.statements})",
                  flush=True)
        else:
            facts += "; pg_stat_statements loaded"
        readers = Readers(stack)
        try:
            drain = drain_alone(stack, drain_n, 0)
            print(f"full drain alone          {drain:,.0f} messages/s ({drain_n} messages)", flush=True)
            settle(stack)
            readers.thread.start()
            offset = drain_n
            for rate in rates:
                result = step(stack, readers, rate, seconds, offset)
                offset += result["messages"]
                steps.append(result)
                print(f"{rate:>6g}/s  {'held' if result['held'] else 'FAILED'}  oldest due "
                      f"{result['oldest_due_age_s']:.3f} s, webhook p99 {result['webhook_p99_ms']} ms "
                      f"({result['webhook_p99_ms_apart_from_reads']} ms apart from reads; longest reads "
                      f"{result['read_ms']} ms), "
                      f"Postgres {result['pg_cpu_ms_per_message']} CPU-ms and {result['wal_bytes_per_message']} WAL "
                      f"bytes per message, {result['connections_max']} connections "
                      f"({result['connections_opened_per_s']} opened per s); the whole server "
                      f"{result['server_cpu_ms_per_message']} CPU-ms per message", flush=True)
                print("          CPU-ms per message: " + ", ".join(f"{k} {v}" for k, v in
                                                           result["cpu_ms_per_message"].items())
                      + f"; the deployment's (Postgres, web, workers): {result['deployment_cpu_ms_per_message']}",
                      flush=True)
                if result["statements"]:
                    print("          Postgres ms per message by statement: " + ", ".join(
                        f"{st['statement']} {st['ms_per_message']} ({st['calls_per_message']} calls)"
                        for st in result["statements"][:10]), flush=True)
                if not result["held"]:
                    break
        finally:
            readers.stop.set()
            stack.stop()
    held = [s for s in steps if s["held"]]
    ceiling = held[-1]["rate"] if held else 0.0
    ratio = ceiling / drain if drain else None
    if held:
        top = held[-1]
        per_core = 1000 / top["deployment_cpu_ms_per_message"]
        pg = top["server_cpu_ms_per_message"] or top["pg_cpu_ms_per_message"]  # the whole server's, when known
        print(f"at the ceiling the deployment (Postgres, web, workers) spent {top['deployment_cpu_ms_per_message']}"
              f" CPU-ms per message: {per_core:.0f} messages/s per core of its own, Postgres "
              f"{pg} ms of it ({1000 / pg:.0f} "
              "messages/s per Postgres core)")
    print(f"ceiling {ceiling:g} messages/s with everything running; full drain alone {drain:,.0f}/s; "
          f"ratio {ratio:.2f} (goal >= 0.6); reads: {readers.reads}")
    write(args.json, "capacity", {
        "step_seconds": seconds, "rates": rates, "workers": WORKERS, "sender_mps": SENDER_MPS,
        "drain_alone": drain, "ceiling": ceiling, "steps": steps, "reads": readers.reads,
        "headline": [{"what": "capacity: the highest enqueue rate held with everything running (queue age < 1 s, "
                              "webhook p99 < 50 ms)", "unit": "messages/s", "value": ceiling,
                      "reference": round(drain, 1), "reference_name": "the full drain alone, same stack",
                      "ratio": round(ratio, 3) if ratio is not None else None, "goal": ">= 0.6",
                      "met": ratio is not None and ratio >= 0.6}],
        "statements_unavailable": stack.statements,
        "tables": [*([{"title": f"Postgres milliseconds per message by statement at the ceiling ({ceiling:g}/s; "
                                "pg_stat_statements: executor and planner time, wall clock)",
                       "columns": ["statement (wa_outbox/sql/)", "ms per message", "calls per message"],
                       "rows": [[st["statement"], st["ms_per_message"], st["calls_per_message"]]
                                for st in held[-1]["statements"]]}] if held and held[-1]["statements"] else []),
                   *([{"title": f"CPU milliseconds per message by stage at the ceiling ({ceiling:g}/s)",
                       "columns": ["stage", "CPU-ms per message"],
                       "rows": [[k, v] for k, v in held[-1]["cpu_ms_per_message"].items()]
                       + [["the deployment's (Postgres, web, workers)", held[-1]["deployment_cpu_ms_per_message"]]]}]
                     if held else []),
                   {"title": "Each step of the capacity run",
                    "columns": ["rate /s", "held", "oldest due s", "webhook p99 ms", "PG server CPU-ms/msg",
                                "deployment CPU-ms/msg", "WAL B/msg", "connections", "opened /s"],
                    "rows": [[s["rate"], s["held"], s["oldest_due_age_s"], s["webhook_p99_ms"],
                              s["server_cpu_ms_per_message"], s["deployment_cpu_ms_per_message"],
                              s["wal_bytes_per_message"], s["connections_max"], s["connections_opened_per_s"]]
                             for s in steps]}],
        "plots": [{"name": "capacity", "title": "Queue age and webhook latency against the enqueue rate",
                   "x_label": "enqueue rate (messages/s)", "y_label": "milliseconds", "kind": "line",
                   "series": {"oldest due message, worst second (ms)": [[s["rate"],
                                                                        round(s["oldest_due_age_s"] * 1000, 1)]
                                                                       for s in steps],
                              "status webhook p99 (ms)": [[s["rate"], s["webhook_p99_ms"] or 0] for s in steps]}}],
    }, facts=facts)


if __name__ == "__main__":
    main()
