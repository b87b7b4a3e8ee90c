"""Chaos run: the whole system under fire, then an audit of what every recipient received against the database.

    .venv/bin/python bench/chaos.py [--n 3000] [--quick]

Everything on this machine, nothing shared: a private embedded Postgres (its own data directory, restarted during the
run), the web app under gunicorn, WORKERS worker processes (`python worker.py`), and the Graph API simulator, which
injects 5xx, timeouts, lost responses, 130429, 131056 and permanent errors, and redelivers status webhooks (duplicated,
reordered, batched). Meanwhile:
- messages are enqueued three ways: SQL `enqueue_many`, Python `enqueue`, and HTTP `POST /v1/messages` with an
  `Idempotency-Key`, each POST sent twice (a client retry) and retried until answered through web restarts;
- customers write in (signed inbound webhooks), and poison webhooks arrive: NUL and lone surrogates in texts, a status
  with an absurd timestamp, a contact whose profile is a string, nesting too deep to parse;
- a worker is SIGKILLed every few seconds and restarted; the web process is restarted; Postgres is restarted once
  with a fast shutdown and once crashed (`-m immediate`), and every process reconnects by itself.
At the end it audits, and exits non-zero on any violation:
- lost: an accepted message not `sent`/`delivered`/`read`/`failed`/`dead`, or an HTTP 202 whose id is not stored;
- sent twice: a message the simulator accepted more than once;
- dead: exactly the messages to the recipients the simulator refuses permanently, each with its reason;
- inbound: every stored webhook event `done`, or `dead` with a reason (only poison ones).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wa_outbox import enqueue, enqueue_many, migrate  # noqa: E402
from wa_outbox.simulator import SimulatorServer  # noqa: E402
from wa_outbox.webhooks import sign  # noqa: E402

SENDER = "100000000000001"
SECRET = "chaos-app-secret"
TOKEN = "chaos-api-token-0123456789"
ACCESS = "chaos-access-token"
PERMANENT = r"77$"    # recipients ending in 77: the simulator refuses them for good (131026)
WORKERS = 3
FINAL = ("sent", "delivered", "read", "failed", "dead")


def recipient(i: int) -> str:
    return f"+55119{i:08d}"


class Postgres:
    """A private embedded Postgres (pgserver), restartable on purpose."""

    def __init__(self, directory: Path):
        import pgserver
        from pgserver import _commands
        self.server = pgserver.get_server(str(directory / "pgdata"), cleanup_mode="stop")
        self._pg_ctl = _commands.pg_ctl
        self.pgdata = directory / "pgdata"
        with psycopg.connect(self.server.get_uri(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE chaos")
        self.url = self.server.get_uri("chaos")

    def restart(self, mode: str) -> None:
        self._pg_ctl(["-w", "-m", mode, "restart"], pgdata=self.pgdata, user=self.server.system_user, timeout=60)


class Processes:
    def __init__(self, env: dict[str, str], web_port: int, log_dir: Path):
        self.env, self.web_port, self.log_dir = env, web_port, log_dir
        self.web: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.kills = 0
        self._logs: list = []

    def _log(self, name: str):
        handle = open(self.log_dir / f"{name}.log", "a")
        self._logs.append(handle)
        return handle

    def start_web(self) -> None:
        env = {**self.env, "WA_OUTBOX_BIND": f"127.0.0.1:{self.web_port}", "WEB_CONCURRENCY": "2"}
        self.web = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf",
                                     "wsgi:app"], cwd=ROOT, env=env, stdout=self._log("web"), stderr=subprocess.STDOUT)

    def restart_web(self) -> None:
        self.web.send_signal(signal.SIGTERM)
        self.web.wait(timeout=30)
        self.start_web()

    def start_worker(self, index: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "worker.py"], cwd=ROOT, env=self.env,
                                stdout=self._log(f"worker-{index}"), stderr=subprocess.STDOUT)

    def start_workers(self) -> None:
        self.workers = [self.start_worker(i) for i in range(WORKERS)]

    def kill_a_worker(self, rng: random.Random) -> None:
        index = rng.randrange(len(self.workers))
        self.workers[index].send_signal(signal.SIGKILL)
        self.workers[index].wait()
        self.kills += 1
        self.workers[index] = self.start_worker(index)

    def stop(self) -> None:
        for proc in [*self.workers, self.web]:
            if proc and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*self.workers, self.web]:
            if proc:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for handle in self._logs:
            handle.close()


def web_ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/readyz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"chaos: timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def retrying(action, what: str, seconds: float = 120.0):
    """Run a database action until it succeeds: Postgres is restarted under our feet on purpose."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return action()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise SystemExit(f"chaos: gave up on {what}")
            time.sleep(0.5)


class Enqueuer:
    """Enqueues N messages three ways; remembers every id it was given and every HTTP key it used."""

    def __init__(self, url: str, web_url: str, n: int):
        self.url, self.web_url, self.n = url, web_url, n
        self.ids: set[int] = set()
        self.http_keys: dict[str, int] = {}
        self.problems: list[str] = []

    def run(self) -> None:
        third = self.n // 3
        plan = [("sql", i) for i in range(third)] + [("python", i) for i in range(third, 2 * third)] + \
               [("http", i) for i in range(2 * third, self.n)]
        random.Random(1).shuffle(plan)
        batch: list[int] = []
        for way, i in plan:
            if way == "sql":
                batch.append(i)
                if len(batch) == 50:
                    self._sql(batch)
                    batch = []
            elif way == "python":
                self._python(i)
            else:
                self._http(i)
        if batch:
            self._sql(batch)

    @staticmethod
    def _message(i: int) -> dict:
        return {"type": "text", "text": {"body": f"chaos message {i} ✓"}}

    def _sql(self, indexes: list[int]) -> None:
        items = [{"to": recipient(i), "message": self._message(i), "idempotency_key": f"sql-{i}"} for i in indexes]

        def once():
            with psycopg.connect(self.url) as conn:
                return enqueue_many(conn, items)
        self.ids.update(retrying(once, "enqueue_many"))

    def _python(self, i: int) -> None:
        def once():
            with psycopg.connect(self.url) as conn:
                return enqueue(conn, to=recipient(i), message=self._message(i), idempotency_key=f"py-{i}")
        self.ids.add(retrying(once, "enqueue"))

    def _http(self, i: int) -> None:
        key = f"http-{i}"
        body = {"to": recipient(i), "message": self._message(i)}
        got = set()
        for _ in range(2):  # the client retries once even after a 202: the same key must give the same id
            deadline = time.monotonic() + 120
            while True:
                try:
                    response = requests.post(f"{self.web_url}/v1/messages", json=body, timeout=10, headers={
                        "Authorization": f"Bearer {TOKEN}", "Idempotency-Key": key})
                    if response.status_code == 202:
                        got.add(response.json()["id"])
                        break
                    if response.status_code < 500:
                        self.problems.append(f"HTTP enqueue {i}: {response.status_code} {response.text[:200]}")
                        return
                except requests.RequestException:
                    pass
                if time.monotonic() > deadline:
                    self.problems.append(f"HTTP enqueue {i}: never answered 202")
                    return
                time.sleep(0.3)
        if len(got) != 1:
            self.problems.append(f"HTTP enqueue {i}: one key, ids {sorted(got)}")
        self.ids.update(got)
        self.http_keys[key] = min(got)


def poison_webhooks() -> list[dict]:
    """Signed, JSON, and hostile: each must be stored and acknowledged, and must never hold back another event."""
    def envelope(value: dict) -> dict:
        return {"object": "whatsapp_business_account", "entry": [{"id": "100000000000000", "changes": [
            {"field": "messages", "value": {"messaging_product": "whatsapp",
                                            "metadata": {"display_phone_number": "15550000001",
                                                         "phone_number_id": SENDER}, **value}}]}]}
    now = str(int(time.time()))
    texts = ["nul \u0000 inside", "lone \ud800 surrogate"]
    poison = [envelope({"contacts": [{"profile": {"name": "P"}, "wa_id": "5511900000001"}],
                        "messages": [{"from": "5511900000001", "id": f"wamid.POISON{n}{uuid.uuid4().hex[:8]}",
                                      "timestamp": now, "type": "text", "text": {"body": text}}]})
              for n, text in enumerate(texts)]
    poison.append(envelope({"statuses": [{"id": f"wamid.POISONSTATUS{uuid.uuid4().hex[:8]}", "status": "delivered",
                                          "timestamp": "99999999999999999999", "recipient_id": "5511900000002"}]}))
    poison.append(envelope({"contacts": [{"profile": "a string", "wa_id": "5511900000003"}],
                            "messages": [{"from": "5511900000003", "id": f"wamid.POISONP{uuid.uuid4().hex[:8]}",
                                          "timestamp": now, "type": "text", "text": {"body": "profile"}}]}))
    return poison


def post_signed(web_url: str, body: bytes) -> int | None:
    try:
        return requests.post(f"{web_url}/webhooks/whatsapp", data=body, timeout=10, headers={
            "Content-Type": "application/json", "X-Hub-Signature-256": sign(SECRET, body)}).status_code
    except requests.RequestException:
        return None


def inbound_stream(sim: SimulatorServer, web_url: str, stop: threading.Event, problems: list[str]) -> None:
    bodies = [json.dumps(p).encode() for p in poison_webhooks()]
    bodies.append(b'{"object":"whatsapp_business_account","entry":' + b"[" * 10_000 + b"]" * 10_000 + b"}")
    n = 0
    while not stop.wait(0.5):
        sim.inbound(f"+55219{n:08d}", f"customer message {n}")
        if bodies and n % 5 == 0:
            body = bodies.pop()
            for _ in range(60):  # through web restarts: Meta retries too
                status = post_signed(web_url, body)
                if status == 200:
                    break
                if status is not None and status != 503:
                    problems.append(f"poison webhook answered {status}")
                    break
                time.sleep(0.5)
        n += 1


def audit(url: str, sim: SimulatorServer, enqueuer: Enqueuer, inbound_problems: list[str]) -> list[str]:
    problems = list(enqueuer.problems) + inbound_problems
    with psycopg.connect(url) as conn:
        rows = {r[0]: r[1:] for r in conn.execute(
            "SELECT id, status, recipient, last_error FROM wa_outbox.notifications")}
        events = conn.execute("SELECT status, count(*), count(*) FILTER (WHERE last_error IS NULL) "
                              "FROM wa_outbox.webhook_events GROUP BY status").fetchall()
        dead_events = conn.execute("SELECT id, last_error FROM wa_outbox.webhook_events WHERE status = 'dead'"
                                   ).fetchall()
    missing = enqueuer.ids - rows.keys()
    if missing:
        problems.append(f"lost: {len(missing)} accepted ids not stored, e.g. {sorted(missing)[:5]}")
    unfinished = [i for i, (status, _, _) in rows.items() if status not in FINAL]
    if unfinished:
        problems.append(f"lost: {len(unfinished)} messages not finished, e.g. {unfinished[:5]}")
    if len(rows) != enqueuer.n:
        problems.append(f"stored {len(rows)} messages for {enqueuer.n} enqueued (a duplicate enqueue?)")
    received = collections.Counter(int(str(m.get("biz_opaque_callback_data", "")).split(":")[0])
                                   for m in sim.messages() if str(m.get("biz_opaque_callback_data", "")).split(":")[0]
                                   .isdigit())
    twice = {i: c for i, c in received.items() if c > 1}
    if twice:
        problems.append(f"sent twice: {len(twice)} messages, e.g. {list(twice.items())[:5]}")
    permanent = {i for i, (_, to, _) in rows.items() if re.search(PERMANENT, to)}
    dead = {i for i, (status, _, _) in rows.items() if status == "dead"}
    if dead != permanent:
        problems.append(f"dead set differs: {len(dead - permanent)} unexpected (e.g. "
                        f"{[(i, (rows[i][2] or {}).get('message')) for i in sorted(dead - permanent)[:3]]}), "
                        f"{len(permanent - dead)} permanent ones not dead")
    if any(not (rows[i][2] or {}).get("message") for i in dead):
        problems.append("a dead message without its reason")
    never_sent = [i for i in rows.keys() - permanent if received[i] == 0 and rows[i][0] != "dead"]
    if never_sent:
        problems.append(f"{len(never_sent)} messages marked sent that the simulator never received: {never_sent[:5]}")
    by_status = {status: (count, no_reason) for status, count, no_reason in events}
    for status in ("queued", "processing"):
        if status in by_status:
            problems.append(f"inbound: {by_status[status][0]} webhook events still {status}")
    if any(not error for _, error in dead_events):
        problems.append("inbound: a dead webhook event without its reason")
    print(f"chaos: {len(rows)} messages: " + ", ".join(
        f"{s} {n}" for s, n in sorted(collections.Counter(r[0] for r in rows.values()).items())))
    print(f"chaos: simulator accepted {sum(received.values())} sends for {len(received)} messages; "
          f"webhook events: " + ", ".join(f"{s} {n}" for s, (n, _) in sorted(by_status.items())))
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000, help="messages (default 3000)")
    parser.add_argument("--quick", action="store_true", help="600 messages, fewer kills: a short version for CI")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the queue to settle")
    args = parser.parse_args()
    n = 600 if args.quick else args.n
    rng = random.Random(7)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="wa-outbox-chaos-") as tmp:
        directory = Path(tmp)
        os.chmod(directory, 0o755)  # pgserver runs the server as its own user when we are root
        pg = Postgres(directory)
        migrate.upgrade(pg.url)
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("INSERT INTO wa_outbox.settings VALUES ('default_phone_number_id', %s)", (SENDER,))
        web_port = 18000 + rng.randrange(1000)
        web_url = f"http://127.0.0.1:{web_port}"
        faults = [{"mode": "error", "code": 131026, "match": {"to": PERMANENT}},
                  {"mode": "http_error", "status": 503, "rate": 0.05},
                  {"mode": "error", "code": 131000, "rate": 0.05},
                  {"mode": "timeout", "ms": 3000, "rate": 0.02},
                  {"mode": "lost_response", "rate": 0.03},
                  {"mode": "error", "code": 130429, "rate": 0.01},
                  {"mode": "error", "code": 131056, "rate": 0.01}]
        with SimulatorServer(access_token=ACCESS, app_secret=SECRET, webhook_url=f"{web_url}/webhooks/whatsapp",
                             faults=faults, seed=11, status_delays_ms=(30, 60, 90), duplicate_rate=0.5,
                             reorder_rate=0.3, batch_rate=0.3, webhook_max_attempts=30,
                             webhook_retry_ms=200) as sim:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
            env.update(DATABASE_URL=pg.url, WHATSAPP_APP_SECRET=SECRET, WHATSAPP_VERIFY_TOKEN="chaos-verify",
                       WA_OUTBOX_API_TOKENS=TOKEN, WHATSAPP_ACCESS_TOKEN=ACCESS, WHATSAPP_PHONE_NUMBER_ID=SENDER,
                       WHATSAPP_API_BASE_URL=sim.base_url, WA_OUTBOX_POLL_INTERVAL="0.2",
                       WA_OUTBOX_CONNECT_TIMEOUT="1", WA_OUTBOX_SEND_TIMEOUT="2", WA_OUTBOX_LEASE_SECONDS="10",
                       WA_OUTBOX_RETRY_BASE_SECONDS="0.2", WA_OUTBOX_RETRY_MAX_SECONDS="2",
                       WA_OUTBOX_UNKNOWN_WINDOW_SECONDS="30", WA_OUTBOX_WORKER_CONCURRENCY="16",
                       WA_OUTBOX_SHUTDOWN_GRACE="5", LOG_LEVEL="WARNING")
            procs = Processes(env, web_port, directory)
            procs.start_web()
            wait(lambda: web_ready(web_url), 60, "the web app")
            procs.start_workers()
            enqueuer = Enqueuer(pg.url, web_url, n)
            stop = threading.Event()
            inbound_problems: list[str] = []
            threads = [threading.Thread(target=enqueuer.run, name="enqueue"),
                       threading.Thread(target=inbound_stream, args=(sim, web_url, stop, inbound_problems),
                                        name="inbound")]
            for thread in threads:
                thread.start()
            try:
                # The fire: a worker killed every few seconds; the web restarted; Postgres restarted twice.
                events = {6: ("web restarted", procs.restart_web),
                          12: ("postgres restarted (fast)", lambda: pg.restart("fast")),
                          20: ("postgres crashed and restarted (immediate)", lambda: pg.restart("immediate"))}
                tick = 0
                while threads[0].is_alive() or tick < 24:
                    time.sleep(1)
                    tick += 1
                    if tick in events:
                        label, action = events[tick]
                        action()
                        print(f"chaos: t+{tick}s {label}", flush=True)
                    if tick % 3 == 0:
                        procs.kill_a_worker(rng)
                threads[0].join()
                stop.set()
                threads[1].join()
                print(f"chaos: enqueued {n} in {time.monotonic() - started:.0f} s, {procs.kills} workers killed; "
                      "settling", flush=True)

                def settled() -> bool:
                    try:
                        with psycopg.connect(pg.url) as conn:
                            pending = conn.execute(
                                "SELECT (SELECT count(*) FROM wa_outbox.notifications "
                                "        WHERE status IN ('queued', 'sending', 'unknown'))"
                                "     + (SELECT count(*) FROM wa_outbox.webhook_events "
                                "        WHERE status IN ('queued', 'processing'))").fetchone()[0]
                    except psycopg.OperationalError:
                        return False
                    return pending == 0 and sim.wait_for_webhooks_idle(0.1)
                with contextlib.suppress(SystemExit):
                    wait(settled, args.timeout, "every message and webhook event settled")
                problems = audit(pg.url, sim, enqueuer, inbound_problems)
            finally:
                stop.set()
                procs.stop()
        pg.server.cleanup()
    print(f"chaos: {time.monotonic() - started:.0f} s")
    if problems:
        for problem in problems:
            print(f"chaos: VIOLATION {problem}")
        raise SystemExit(1)
    print("chaos: 0 lost, 0 sent twice, dead letters exactly the permanent failures, every webhook event settled")


if __name__ == "__main__":
    main()
