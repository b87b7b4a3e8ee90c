"""Event deliveries benchmark: the workers' signed pushes to a local receiver beside the bare `requests` client
ceiling, and what two subscribed endpoints cost the send drain and webhook ingest, each in the same run.

    .venv/bin/python bench/deliveries.py [--events 20000] [--messages 20000] [--duration 10] [--setup 2x16]
                                         [--push-rounds 3] [--rounds 1] [--ingest-rounds 8]
                                         [--cases push,drain,ingest] [--quick] [--json PATH]

On real Postgres (DATABASE_URL, else the embedded one), in a scratch database (created and dropped), durable:
- push: N events written set-based (message.received, a realistic payload), one unordered endpoint subscribed, then
  worker processes (the setup: processes x delivery threads, WA_OUTBOX_DELIVERY_CONCURRENCY and _PER_ENDPOINT)
  started and timed until every event is delivered; beside it, as many processes x threads of a bare
  `requests.Session` loop POSTing the same signed bodies (envelope, webhook-id, -timestamp, -signature, prepared
  before the clock starts) to the same receiver. The receiver is the fastest one here: a Node.js `http` server
  answering 200 `{}` (node, on every machine of this kind), the same process for both; the two alternate
  `--push-rounds` times on the same events, and the figures are the means. Goal: >= 0.8 of the client.
- drain: the send drain in dry run (claim, record, timeline and message.status events; no HTTP to Meta), 2 worker
  processes x 128 as bench/outbox.py, with no endpoint and then with two subscribed (every message.status delivered
  to both, by the same workers), alternating `--rounds` times, each drain after VACUUM ANALYZE and a CHECKPOINT.
  Goal: >= 0.9 of the drain without.
- ingest: bench/webhooks.py's way (gunicorn with the service's settings, wrk with signed bodies, 1 update per POST,
  20 % redeliveries) while one worker process processes the inbound events (and delivers their message.received
  events), with no endpoint and then with two subscribed, alternating `--ingest-rounds` times: the figure is the mean
  of each, beside the median and range of the pairs' ratios. Goal: >= 0.9 of the ingest without. The receiver stands
  for the app's server, a machine of its own in a deployment: here it shares the cores, at niceness 19, so that it
  takes the CPU the service leaves rather than the web's (its CPU seconds are reported). The worker and its
  deliveries run at their niceness, as `wa-outbox worker` does (WA_OUTBOX_WORKER_NICE, 0, and
  WA_OUTBOX_DELIVERY_NICE, 10, unless set here); what the worker did not deliver during the ingest it delivers after:
  the seconds from the last POST until every event was delivered are reported.
Every figure sits beside its reference measured minutes apart on the same machine: compare the ratios.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import requests
from requests.adapters import HTTPAdapter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import webhooks as webhook_bench  # noqa: E402
from bench._results import add_json_argument, write  # noqa: E402
from bench.chaos_endpoints import engine_missing, free_port  # noqa: E402
from bench.outbox import SPAWN, _run_worker, analyze, machine_facts, scratch_database, server_url  # noqa: E402
from wa_outbox import enqueue_many, migrate  # noqa: E402
from wa_outbox.config import Settings  # noqa: E402
from wa_outbox.events import envelope_bytes, event_id  # noqa: E402
from wa_outbox.secret_box import SecretBox, fingerprint, generate_key  # noqa: E402

SENDER = "100000000000001"
TOKEN = "bench-token"
DRAIN_SETUP = (2, 128)  # the send drain's processes x send slots: bench/outbox.py's DRY_RUN
PUSH_GOAL, COST_GOAL = 0.8, 0.9
# Ingest pairs are short (10 s of wrk each) and this machine's speed moves by 10-20 % within minutes: a pair's ratio
# ranged 0.75-1.2 over one hour (2026-12-06), so the figure is the mean over many pairs, beside their median and range.
INGEST_ROUNDS = 8
PUSH_ROUNDS = 3  # the bare client's rate alone moved 2,472-3,186 req/s within ten minutes (2026-12-07)
RECEIVER_NICE = 19
KEY = generate_key()
# The receiver: Node's http module, answering every POST 200 once its body is read; it counts what it answered.
RECEIVER_JS = r"""
const http = require('http');
let answered = 0;
const server = http.createServer((req, res) => {
  req.on('data', () => {});
  req.on('end', () => {
    answered++;
    res.writeHead(200, {'Content-Type': 'application/json', 'Content-Length': '2'});
    res.end('{}');
  });
});
server.keepAliveTimeout = 120000;
server.headersTimeout = 121000;
process.on('SIGTERM', () => { console.log(JSON.stringify({answered})); process.exit(0); });
server.listen(Number(process.argv[1]), '127.0.0.1', () => console.log('listening'));
"""
# What the benches poll (ten times a second) to see a drain end: whether anything is left, each part read from the
# head of a partial index in its order. `status IN (...)` with a count read the whole deliveries table (8 ms a poll at
# 20,000 rows, 8 % of a core taken from the workers being measured, and counted as their Postgres CPU).
PENDING_SENDS = """
SELECT (SELECT 1 FROM wa_outbox.notifications WHERE status = 'queued' AND NOT blocked
        ORDER BY priority, next_attempt_at LIMIT 1) IS NOT NULL
    OR (SELECT 1 FROM wa_outbox.notifications WHERE status = 'queued' AND blocked
        ORDER BY phone_number_id, recipient, id LIMIT 1) IS NOT NULL
    OR (SELECT 1 FROM wa_outbox.notifications WHERE status = 'sending' ORDER BY locked_until LIMIT 1) IS NOT NULL
"""
DELIVERED = "SELECT count(*) FROM wa_outbox.deliveries WHERE status = 'delivered'"
# Deliveries still to make: queued or in flight, or events not dispatched yet (an endpoint's cursor behind the feed's
# last event): deliveries_due, deliveries_leased, events_feed.
UNDELIVERED = """
SELECT (SELECT 1 FROM wa_outbox.deliveries WHERE status = 'queued' ORDER BY endpoint_id, next_attempt_at, id
        LIMIT 1) IS NOT NULL
    OR (SELECT 1 FROM wa_outbox.deliveries WHERE status = 'delivering' ORDER BY locked_until LIMIT 1) IS NOT NULL
    OR EXISTS (SELECT 1 FROM wa_outbox.endpoints p WHERE p.state = 'enabled' AND EXISTS (
            SELECT 1 FROM wa_outbox.events e WHERE (e.txid, e.seq) > (p.cursor_txid, p.cursor_seq)))
"""


class Receiver:
    def __init__(self, nice: int = 0) -> None:
        node = shutil.which("node")
        if node is None:
            raise SystemExit("bench/deliveries.py needs Node.js for its receiver (`node`; Debian: nodejs)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/events"
        self.process = subprocess.Popen([node, "-e", RECEIVER_JS, str(self.port)], stdout=subprocess.PIPE, text=True,
                                        preexec_fn=(lambda: os.nice(nice)) if nice else None)
        if self.process.stdout is None or self.process.stdout.readline().strip() != "listening":
            raise SystemExit("the Node.js receiver did not start")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=30)
        return int(json.loads(out.strip().splitlines()[-1])["answered"]) if out.strip() else 0


def settings_env(url: str, processes_threads: tuple[int, int] | None = None) -> dict[str, str]:
    env = {"DATABASE_URL": url, "WHATSAPP_ACCESS_TOKEN": TOKEN, "WHATSAPP_PHONE_NUMBER_ID": SENDER,
           "WA_OUTBOX_SECRET_KEY": KEY, "WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE": "true", "WA_OUTBOX_RATE_LIMIT_MPS": "1e6",
           "WA_OUTBOX_POLL_INTERVAL": "0.1", "WA_OUTBOX_DRY_RUN": "true", "LOG_LEVEL": "WARNING"}
    # the priorities `wa-outbox worker` would run at here (WA_OUTBOX_WORKER_NICE, WA_OUTBOX_DELIVERY_NICE), if set
    env.update({name: os.environ[name] for name in ("WA_OUTBOX_WORKER_NICE", "WA_OUTBOX_DELIVERY_NICE")
                if os.environ.get(name, "").strip()})
    if processes_threads is not None:
        threads = str(processes_threads[1])
        env.update(WA_OUTBOX_DELIVERY_CONCURRENCY=threads, WA_OUTBOX_DELIVERY_PER_ENDPOINT=threads)
    return env


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: str) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_seconds(pids: list[int], url: str) -> dict[str, float]:
    """CPU seconds used so far by these processes, and by the Postgres backends of `url`'s database (those alive now,
    found in pg_stat_activity: a backend's process title may be cut short, its database name with it)."""
    used = {"clients": 0.0, "postgres": 0.0}
    with psycopg.connect(url, autocommit=True) as conn:
        backends = [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")]
    for kind, group in (("clients", pids), ("postgres", backends)):
        for pid in group:
            with contextlib.suppress(OSError):  # gone meanwhile
                used[kind] += _cpu(str(pid))
    return used


class Workers:
    """Worker processes (bench/outbox.py's _run_worker: imported and set up before the start barrier)."""

    def __init__(self, env: dict[str, str], processes: int, send_slots: int = 16) -> None:
        settings = dataclasses.replace(Settings.from_env(env), worker_concurrency=send_slots)
        self.start, self.stopping = SPAWN.Barrier(processes + 1), SPAWN.Event()
        self.processes = [SPAWN.Process(target=_run_worker, args=(settings, self.start, self.stopping), daemon=True)
                          for _ in range(processes)]
        for process in self.processes:
            process.start()

    def go(self) -> float:
        self.start.wait(timeout=120)
        return time.perf_counter()

    def stop(self) -> None:
        self.stopping.set()
        for process in self.processes:
            process.join(60)
            if process.is_alive():
                process.kill()


def add_endpoints(url: str, receiver: Receiver, count: int) -> list[str]:
    """`count` unordered endpoints subscribed to every event, all to the receiver. Returns their secrets."""
    box, secrets = SecretBox([KEY]), []
    with psycopg.connect(url) as conn:
        conn.execute("DELETE FROM wa_outbox.endpoints")
        for i in range(count):
            secret = "whsec_" + base64.b64encode(os.urandom(24)).decode("ascii")
            conn.execute("INSERT INTO wa_outbox.endpoints (id, url, description, secret_enc, secret_fingerprint) "
                         "VALUES (%s, %s, %s, %s, %s)", (f"ep_bench{i}{os.urandom(4).hex()}", receiver.url,
                                                         f"bench {i}", box.encrypt(secret), fingerprint(secret)))
            secrets.append(secret)
    return secrets


def clear(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("SET LOCAL wa_outbox.allow_prune = 'on'")  # the timeline refuses TRUNCATE otherwise
        conn.execute("TRUNCATE wa_outbox.notifications, wa_outbox.notification_events, wa_outbox.workers, "
                     "wa_outbox.events, wa_outbox.deliveries, wa_outbox.delivery_attempts, wa_outbox.webhook_events, "
                     "wa_outbox.endpoints CASCADE")


def wait_until(conn: psycopg.Connection, query: str, done: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done(conn.execute(query).fetchone()[0]):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


# --- push: deliveries/s beside the bare client ----------------------------------------------------------------------


FILL_EVENTS = """
INSERT INTO wa_outbox.events (type, phone_number_id, wa_id, data)
SELECT 'message.received', %(sender)s::text, w.wa_id, jsonb_build_object(
    'schema_version', 1, 'phone_number_id', %(sender)s::text, 'display_phone_number', '15550783881',
    'account_id', '419561257915477', 'wa_id', w.wa_id,
    'contact', jsonb_build_object('profile', jsonb_build_object('name', 'Cliente ' || g), 'wa_id', w.wa_id),
    'message', jsonb_build_object('from', w.wa_id, 'id', 'wamid.BENCH' || g, 'timestamp', (1749416383 + g)::text,
                                  'type', 'text', 'text', jsonb_build_object('body', 'Olá, pedido ' || g || ' ✓')),
    'dedup_key', 'm:wamid.BENCH' || g, 'webhook_event_id', g, 'app_id', NULL)
FROM generate_series(1, %(n)s::int) g CROSS JOIN LATERAL (SELECT '5511' || (900000000 + g)::text AS wa_id) w
"""


def signed_bodies(url: str, secret: str) -> list[tuple[bytes, dict[str, str]]]:
    """What the workers post for every event: the envelope's bytes and the Standard Webhooks headers."""
    from standardwebhooks.webhooks import Webhook
    webhook, stamp = Webhook(secret), datetime.now(UTC)
    bodies = []
    with psycopg.connect(url) as conn:
        for seq, type_, occurred_at, data in conn.execute(
                "SELECT seq, type, occurred_at, data FROM wa_outbox.events ORDER BY seq"):
            body = envelope_bytes(seq, type_, occurred_at, data)
            bodies.append((body, {"Content-Type": "application/json", "webhook-id": event_id(seq),
                                  "webhook-timestamp": str(int(stamp.timestamp())),
                                  "webhook-signature": webhook.sign(event_id(seq), stamp, body.decode())}))
    return bodies


def _bare(url: str, bodies: list[tuple[bytes, dict[str, str]]], threads: int, start: Any, results: Any) -> None:
    """One bare client process: a pooled requests.Session, `threads` threads posting `bodies` between them."""
    session = requests.Session()
    session.mount("http://", HTTPAdapter(pool_maxsize=threads))
    todo, lock, counts = iter(bodies), threading.Lock(), {"done": 0, "failed": 0}

    def post() -> None:
        while True:
            with lock:
                item = next(todo, None)
            if item is None:
                return
            response = session.post(url, data=item[0], headers=item[1], timeout=(5, 15))
            with lock:
                counts["done"] += 1
                counts["failed"] += response.status_code != 200

    posters = [threading.Thread(target=post) for _ in range(threads)]
    start.wait()
    started, cpu = time.perf_counter(), time.process_time()
    for poster in posters:
        poster.start()
    for poster in posters:
        poster.join()
    results.put((counts["done"], counts["failed"], time.perf_counter() - started, time.process_time() - cpu))


def bare_client(receiver: Receiver, bodies: list, setup: tuple[int, int]) -> tuple[float, float]:
    """Requests/s, and the clients' CPU ms per request."""
    processes, threads = setup
    start, results = SPAWN.Barrier(processes), SPAWN.Queue()
    clients = [SPAWN.Process(target=_bare, args=(receiver.url, bodies[i::processes], threads, start, results),
                             daemon=True) for i in range(processes)]
    for client in clients:
        client.start()
    done, failed, elapsed, cpu = zip(*(results.get(timeout=600) for _ in clients), strict=True)
    for client in clients:
        client.join(10)
    if sum(failed):
        raise SystemExit(f"the bare client got {sum(failed)} answers other than 200")
    return sum(done) / max(elapsed), 1000 * sum(cpu) / sum(done)


# Where a worker's threads spend their time during the push (py-spy, every thread, idle or not), by the first step a
# stack passes through.
PROFILE_STEPS = (
    ("delivery thread: HTTP request and answer (urllib3, http.client)", ("_deliver (wa_outbox/worker/_deliverer.py",),
     ("urlopen", "getresponse", "_make_request", "read (urllib3")),
    ("delivery thread: signing, envelope, URL rule, resolving", ("_deliver (wa_outbox/worker/_deliverer.py",), ()),
    ("delivery thread: idle, waiting for a claimed row", ("_worker (concurrent/futures/thread.py",), ()),
    ("deliverer loop: claim (a statement, its commit)", ("claim (wa_outbox/worker/_deliverer.py",), ()),
    ("deliveries recorder: record (a statement, its commit)", ("_record (wa_outbox/worker/_deliverer.py",), ()),
    ("deliveries recorder: waiting for outcomes", ("_record_loop (wa_outbox/worker/_deliverer.py",), ()),
    ("deliverer loop: dispatch (a statement, its commit)", ("dispatch (wa_outbox/worker/_deliverer.py",), ()),
    ("deliverer loop: waiting to be woken", ("run (wa_outbox/worker/_deliverer.py",), ()),
    ("the worker's other threads (sends, inbound, listener, maintenance)", ("wa_outbox/worker/",), ()),
)


def profile(pid: int, seconds: float) -> dict[str, float]:
    """Percent of py-spy's samples of every thread of `pid` (idle ones too) in each of PROFILE_STEPS."""
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        raise SystemExit("--profile needs py-spy (pip install -e '.[bench]')")
    raw = Path(tempfile.mkdtemp(prefix="wa-outbox-spy-")) / "raw.txt"
    subprocess.run([py_spy, "record", "--pid", str(pid), "--idle", "--nonblocking", "--format", "raw", "--rate", "100",
                    "--duration", str(max(1, int(seconds))), "--output", str(raw)], capture_output=True, check=False)
    samples: dict[str, int] = {}
    for line in (raw.read_text().splitlines() if raw.exists() else []):
        stack, _, count = line.rpartition(" ")
        step = next((name for name, marks, inner in PROFILE_STEPS
                     if any(m in stack for m in marks) and (not inner or any(i in stack for i in inner))), "other")
        samples[step] = samples.get(step, 0) + int(count)
    shutil.rmtree(raw.parent, ignore_errors=True)
    total = sum(samples.values()) or 1
    return {name: round(100 * samples.get(name, 0) / total, 1) for name, *_ in (*PROFILE_STEPS, ("other",))}


def push_workers(url: str, n: int, setup: tuple[int, int], spy: bool) -> tuple:
    """Workers started, timed until the n events are delivered: (rate, attempts, record statements, CPU before,
    CPU after, profile)."""
    # The service's default poll interval (the drains' 0.1 s makes an idle send loop claim ten times a second, a
    # cost the bare client does not have); NOTIFY and the dispatch at start find the events.
    workers = Workers({**settings_env(url, setup), "WA_OUTBOX_POLL_INTERVAL": "1.0"}, setup[0])
    pids = [p.pid for p in workers.processes if p.pid]
    profiled: dict[str, float] = {}
    spying = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            before = cpu_seconds(pids, url)
            started = workers.go()
            if spy:  # a second into the push, for about a third of it
                spying = threading.Timer(1.0, lambda: profiled.update(profile(pids[0], n / 1000 / 3)))
                spying.start()
            # polled from indexes: counting the delivered rows would scan the table ten times a second
            wait_until(conn, UNDELIVERED, lambda left: not left, 900, f"{n:,} deliveries")
            rate = n / (time.perf_counter() - started)
            after = cpu_seconds(pids, url)
            delivered = conn.execute(DELIVERED).fetchone()[0]
            if delivered != n:
                raise SystemExit(f"push: {delivered:,} of {n:,} events delivered (the receiver answers 200)")
            # Attempts recorded by one statement share its transaction's now(): how many outcomes each recorded.
            attempts, records = conn.execute("SELECT count(*), count(DISTINCT attempted_at) "
                                             "FROM wa_outbox.delivery_attempts").fetchone()
    finally:
        if spying is not None:
            spying.join()
        workers.stop()
    return rate, attempts, records, before, after, profiled


def push(url: str, receiver: Receiver, n: int, setup: tuple[int, int], spy: bool = False, rounds: int = 1
         ) -> dict[str, Any]:
    clear(url)
    [secret] = add_endpoints(url, receiver, 1)
    with psycopg.connect(url) as conn:
        conn.execute(FILL_EVENTS, {"sender": SENDER, "n": n})
    bodies = signed_bodies(url, secret)
    pairs, cpu_totals = [], {"clients": 0.0, "postgres": 0.0}
    attempts = records = 0
    for _ in range(rounds):  # each: the bare client, then the workers, on the same events (none delivered yet)
        forget_deliveries(url)
        analyze(url)
        print(f"push: bare requests client, {setup[0]} x {setup[1]} threads, {n:,} signed bodies ...", flush=True)
        bare, bare_cpu = bare_client(receiver, bodies, setup)
        print(f"push: {bare:,.0f} req/s ({bare_cpu:.2f} ms of client CPU each); workers, {setup[0]} x {setup[1]} "
              "delivery threads ...", flush=True)
        rate, attempts, records, before, after, _ = push_workers(url, n, setup, False)
        pairs.append((bare, rate, bare_cpu))
        for k in cpu_totals:
            cpu_totals[k] += after[k] - before[k]
        print(f"push: {rate:,.0f} deliveries/s ({rate / bare:.2f} of the bare client); {attempts:,} attempts "
              f"recorded by {records:,} statements ({attempts / max(1, records):.1f} each)", flush=True)
    profiled: dict[str, float] = {}
    if spy:  # a last pass, not measured: py-spy takes CPU from the process it samples
        forget_deliveries(url)
        profiled = push_workers(url, n, setup, True)[5]
    bare = sum(p[0] for p in pairs) / len(pairs)
    rate = sum(p[1] for p in pairs) / len(pairs)
    cpu = {k: round(1000 * v / (n * len(pairs)), 3) for k, v in cpu_totals.items()}
    print(f"push, {len(pairs)} pairs: {rate:,.0f} deliveries/s beside {bare:,.0f} ({rate / bare:.2f} of the bare "
          f"client); CPU ms per delivery: workers {cpu['clients']}, Postgres {cpu['postgres']}", flush=True)
    for step, share in profiled.items():
        print(f"  {share:5.1f}%  {step}")
    return {"deliveries_per_s": rate, "bare_per_s": bare, "ratio": rate / bare, "events": n, "attempts": attempts,
            "record_statements": records, "pairs": [[round(b), round(r)] for b, r, _ in pairs],
            "cpu_ms_per_delivery": {"workers": cpu["clients"], "postgres": cpu["postgres"]},
            "bare_cpu_ms_per_request": round(sum(p[2] for p in pairs) / len(pairs), 3), "profile": profiled}


def forget_deliveries(url: str) -> None:
    """The events as they were before any delivery: none dispatched, none delivered."""
    with psycopg.connect(url) as conn:
        conn.execute("TRUNCATE wa_outbox.deliveries, wa_outbox.delivery_attempts")
        conn.execute("UPDATE wa_outbox.endpoints SET cursor_txid = '0', cursor_seq = 0, failing_since = NULL")


# --- drain: the send drain with two endpoints and without ----------------------------------------------------------


def checkpoint(url: str) -> None:
    """Each drain starts after a CHECKPOINT: the one before it (two endpoints: 40,000 deliveries, about 90 MB of WAL)
    would otherwise bring a checkpoint into the next drain, the one with no endpoint (the reference) included."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            print("drain: no CHECKPOINT (not a superuser or pg_checkpoint): a drain may meet the last one's",
                  flush=True)


def drain(url: str, receiver: Receiver, n: int, endpoints: int) -> dict[str, Any]:
    clear(url)
    add_endpoints(url, receiver, endpoints)
    items = [{"to": f"+5511{900000000 + i:09d}", "message": {"type": "text", "text": {
        "body": f"Olá! Seu pedido {i} saiu para entrega ✓"}}} for i in range(n)]
    with psycopg.connect(url, autocommit=True) as conn:
        for start in range(0, n, 5000):
            enqueue_many(conn, items[start:start + 5000])
    analyze(url)
    checkpoint(url)
    processes, slots = DRAIN_SETUP
    workers = Workers(settings_env(url), processes, send_slots=slots)
    pids = [p.pid for p in workers.processes if p.pid]
    result: dict[str, Any] = {"endpoints": endpoints}
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            before = cpu_seconds(pids, url)
            started = workers.go()
            wait_until(conn, PENDING_SENDS, lambda left: not left, 900, "the drain")
            drained = time.perf_counter() - started
            after = cpu_seconds(pids, url)
            result["drain_per_s"] = n / drained
            result["worker_cpu_ms_per_msg"] = round(1000 * (after["clients"] - before["clients"]) / n, 3)
            result["postgres_cpu_ms_per_msg"] = round(1000 * (after["postgres"] - before["postgres"]) / n, 3)
            result["delivered_during_drain"] = conn.execute(DELIVERED).fetchone()[0]
            result["dispatched_during_drain"] = conn.execute("SELECT count(*) FROM wa_outbox.deliveries").fetchone()[0]
            if endpoints:
                wait_until(conn, UNDELIVERED, lambda left: not left, 900, "the drain's deliveries")
                result["all_delivered_after_s"] = time.perf_counter() - started
                result["deliveries"] = conn.execute(DELIVERED).fetchone()[0]
            result["events"] = conn.execute("SELECT count(*) FROM wa_outbox.events").fetchone()[0]
    finally:
        workers.stop()
    print(f"drain, {endpoints} endpoints: {result['drain_per_s']:,.0f} msgs/s; CPU ms per message: workers "
          f"{result['worker_cpu_ms_per_msg']}, Postgres {result['postgres_cpu_ms_per_msg']}" +
          (f"; {result['dispatched_during_drain']:,} dispatched and {result['delivered_during_drain']:,} delivered "
           f"during the drain, all {result['deliveries']:,} after "
           f"{result['all_delivered_after_s']:.1f} s" if endpoints else ""), flush=True)
    return result


# --- ingest: webhook POSTs with two endpoints and without ----------------------------------------------------------


def ingest(url: str, receiver: Receiver, endpoints: int, bodies: Path, duration: int, connections: int
           ) -> dict[str, Any]:
    clear(url)
    add_endpoints(url, receiver, endpoints)
    env = {**os.environ, **settings_env(url), "WHATSAPP_APP_SECRET": webhook_bench.SECRET,
           "WHATSAPP_VERIFY_TOKEN": "v", "WA_OUTBOX_API_TOKENS": "bench-token-0123456789"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    port = free_port()
    web = webhook_bench.start_gunicorn("wsgi:app", port, env)
    workers = Workers(settings_env(url, (1, 8)), 1)
    try:
        workers.go()
        webhook_bench.run_wrk(port, bodies, 2, connections)  # warm-up (imports, pools, prepared statements)
        pids = [p.pid for p in workers.processes if p.pid]
        before, receiver_before = cpu_seconds(pids, url), _cpu(str(receiver.process.pid))
        result = webhook_bench.run_wrk(port, bodies, duration, connections)
        after, receiver_after = cpu_seconds(pids, url), _cpu(str(receiver.process.pid))
        ended = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            events = conn.execute("SELECT count(*) FROM wa_outbox.events").fetchone()[0]
            delivered = conn.execute(DELIVERED).fetchone()[0]
            # What the worker did not deliver during the ingest it delivers after (the more, the higher its
            # deliveries' niceness): how long after is reported beside the ingest's figure.
            lag = None
            if endpoints:
                wait_until(conn, UNDELIVERED, lambda left: not left, 300, "the ingest's deliveries")
                lag = time.perf_counter() - ended
    finally:
        workers.stop()
        webhook_bench.stop(web)
    print(f"ingest, {endpoints} endpoints: {result['rps']:,.0f} req/s, p99 {result['p99']:.1f} ms; {events:,} events, "
          f"{delivered:,} delivered by the end; CPU seconds per second: the worker "
          f"{(after['clients'] - before['clients']) / duration:.2f}, Postgres (web and worker) "
          f"{(after['postgres'] - before['postgres']) / duration:.2f}, the receiver "
          f"{(receiver_after - receiver_before) / duration:.2f}" +
          (f"; all {endpoints * events:,} delivered {lag:.1f} s after the last POST" if lag is not None else ""),
          flush=True)
    return {"endpoints": endpoints, "rps": result["rps"],
            "worker_cpu_s_per_s": round((after["clients"] - before["clients"]) / duration, 3),
            "postgres_cpu_s_per_s": round((after["postgres"] - before["postgres"]) / duration, 3),
            "receiver_cpu_s_per_s": round((receiver_after - receiver_before) / duration, 3),
            "p50": result["p50"], "p99": result["p99"],
            "errors": result["errors"] + result["socket_errors"], "events": events, "delivered_by_end": delivered,
            "all_delivered_after_end_s": None if lag is None else round(lag, 2)}


# --- results ----------------------------------------------------------------------------------------------------


def pairs_spread(ratios: list[float]) -> str:
    """Each pair's ratio (its two runs minutes apart) summarised for a headline: how far one pair strays from the
    mean. Empty for a single pair."""
    if len(ratios) < 2:
        return ""
    ratios = sorted(ratios)
    return f" ({len(ratios)} pairs: median {statistics.median(ratios):.2f}, {ratios[0]:.2f}-{ratios[-1]:.2f})"


def headline(what: str, value: float, unit: str, reference: float, reference_name: str, goal: float) -> dict:
    ratio = value / reference if reference else None
    return {"what": what, "unit": unit, "value": round(value), "reference": round(reference),
            "reference_name": reference_name, "ratio": round(ratio, 2) if ratio is not None else None,
            "goal": f">= {goal:g} of the reference", "met": ratio is not None and ratio >= goal}


def results_json(args: argparse.Namespace, figures: dict[str, Any]) -> dict[str, Any]:
    rows, tables = [], []
    if "push" in figures:
        p = figures["push"]
        tables.append({"title": "Deliveries: push, CPU per delivery (ms) beside the bare client's per request",
                       "columns": ["workers", "their Postgres backends", "bare requests client"],
                       "rows": [[p["cpu_ms_per_delivery"]["workers"], p["cpu_ms_per_delivery"]["postgres"],
                                 p["bare_cpu_ms_per_request"]]]})
        if p.get("profile"):
            tables.append({"title": "Deliveries: where one worker's threads spend the push (py-spy, every thread, "
                                    "% of samples)", "columns": ["step", "%"],
                           "rows": [[k, v] for k, v in p["profile"].items()]})
        spread = pairs_spread([r / b for b, r in p.get("pairs", []) if b])
        rows.append(headline(f"event deliveries to a local receiver, {args.setup} delivery threads{spread}",
                             p["deliveries_per_s"], "deliveries/s", p["bare_per_s"],
                             "bare requests client, same threads, same signed bodies, same receiver", PUSH_GOAL))
    for case, key, unit, what in (("drain", "drain_per_s", "msgs/s", "send drain (dry run), 2 processes x 128"),
                                  ("ingest", "rps", "req/s", "webhook ingest, 1 update/POST")):
        if case not in figures:
            continue
        pairs = figures[case]
        none = sum(r[key] for r in pairs if r["endpoints"] == 0) / max(1, sum(r["endpoints"] == 0 for r in pairs))
        two = sum(r[key] for r in pairs if r["endpoints"] == 2) / max(1, sum(r["endpoints"] == 2 for r in pairs))
        spread = pairs_spread([b[key] / a[key] for a, b in zip(pairs[0::2], pairs[1::2], strict=True) if a[key]])
        rows.append(headline(f"{what}, two endpoints subscribed{spread}", two, unit, none, "no endpoint, same run",
                             COST_GOAL))
        columns = sorted({k for r in pairs for k in r})
        tables.append({"title": f"Deliveries: {what}, each run in order", "columns": columns,
                       "rows": [[r.get(c) for c in columns] for r in pairs]})
    return {"headline": rows, "tables": tables, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000, help="events pushed (default 20,000)")
    parser.add_argument("--messages", type=int, default=20_000, help="messages drained per case (default 20,000)")
    parser.add_argument("--duration", type=int, default=10, help="seconds of wrk per ingest case (default 10)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--setup", default="2x16", help="push: worker processes x delivery threads (default 2x16)")
    parser.add_argument("--push-rounds", type=int, default=PUSH_ROUNDS,
                        help=f"push: alternations of the bare client and the workers (default {PUSH_ROUNDS})")
    parser.add_argument("--rounds", type=int, default=1, help="drain: alternations of none/two (default 1)")
    parser.add_argument("--ingest-rounds", type=int, default=INGEST_ROUNDS,
                        help=f"ingest: alternations of none/two (default {INGEST_ROUNDS})")
    parser.add_argument("--cases", default="push,drain,ingest")
    parser.add_argument("--quick", action="store_true", help="small sizes: does it start and finish?")
    parser.add_argument("--profile", action="store_true",
                        help="push: where a worker's threads spend their time (py-spy, in the bench extra)")
    add_json_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.events, args.messages, args.duration, args.setup, args.ingest_rounds = 2000, 2000, 3, "1x8", 1
        args.push_rounds = 1
    missing = engine_missing()
    if missing:
        raise SystemExit(f"bench/deliveries.py: nothing to measure: {missing}")
    cases = set(args.cases.split(","))
    setup = tuple(int(x) for x in args.setup.split("x"))
    server = server_url()
    node = subprocess.run(["node", "--version"], text=True, capture_output=True, check=False).stdout.strip()
    facts = (f"{machine_facts(server).replace('the simulator, ', '')}; the receiver: Node.js {node} http; load "
             f"average at start {os.getloadavg()[0]:.1f} (a machine shared with other work: compare the ratios)")
    print(facts, flush=True)
    figures: dict[str, Any] = {}
    receiver = Receiver()
    tmp = Path(tempfile.mkdtemp(prefix="wa-outbox-bench-deliveries-"))
    try:
        with scratch_database(server, "deliveries") as url:
            migrate.upgrade(url)
            with psycopg.connect(url) as conn:
                conn.execute("INSERT INTO wa_outbox.settings (key, value) VALUES ('default_phone_number_id', %s)",
                             (SENDER,))
            if "push" in cases:
                figures["push"] = push(url, receiver, args.events, setup, args.profile,  # type: ignore[arg-type]
                                       args.push_rounds)
            if "drain" in cases:
                figures["drain"] = [drain(url, receiver, args.messages, endpoints)
                                    for _ in range(args.rounds) for endpoints in (0, 2)]
            if "ingest" in cases:
                if not shutil.which("wrk"):
                    raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
                bodies = tmp / "single.txt"
                webhook_bench.write_bodies(bodies, 60_000, per_post=1)
                # The app's receiver runs on a machine of its own in a deployment; here it shares the 2 cores, so it
                # runs at RECEIVER_NICE: it takes what the service leaves, not the web's share (its CPU is reported).
                app = Receiver(nice=RECEIVER_NICE)
                try:
                    figures["ingest"] = [ingest(url, app, endpoints, bodies, args.duration, args.connections)
                                         for _ in range(args.ingest_rounds) for endpoints in (0, 2)]
                finally:
                    figures["ingest_receiver_answered"] = app.stop()
    finally:
        with contextlib.suppress(Exception):
            figures["receiver_answered"] = receiver.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results = results_json(args, figures)
    for row in results["headline"]:
        print(f"{row['what']}: {row['value']:,} {row['unit']} beside {row['reference']:,} ({row['reference_name']}): "
              f"{row['ratio']} (goal {row['goal']}: {'met' if row['met'] else 'NOT met'})")
    write(args.json, "deliveries", results, facts=facts)


if __name__ == "__main__":
    main()
