"""Chaos run: the whole system under fire, then an audit of what every recipient received against the database.

    .venv/bin/python bench/chaos.py [--n 10000] [--mps 25] [--quick] [--json PATH]

Everything on this machine, nothing shared: a private embedded Postgres (its own data directory, stopped and started
during the run), the web app under gunicorn, 3 worker processes (`python worker.py`), and the Graph API simulator,
which injects 5xx, timeouts, lost responses, 130429, 131056 and permanent errors, and redelivers every status webhook
1 to 3 more times, reordered and batched. Meanwhile:
- messages are enqueued four ways from 4 client threads: the SQL function `wa_outbox.enqueue` (many in one
  transaction), Python `enqueue` (likewise), Python `enqueue_many`, and HTTP `POST /v1/messages` with an
  `Idempotency-Key`, each POST sent twice (a client retry) and retried until answered through restarts; a few texts
  carry NUL, which each way must refuse (HTTP: a 4xx) and leave no trace of;
- customers write in (signed inbound webhooks, some texts with NUL), and poison webhooks arrive: NUL and lone
  surrogates in texts, a status with an absurd timestamp, a contact whose profile is a string, nesting too deep;
  every fifth customer sends a file instead (an image, a voice note, a document), whose media lookups answer 503,
  expired URLs and wrong sha256s and whose downloads answer 500 some of the time: each must end stored,
  byte-identical, with one media.ready;
- TRICKLERS connections send a webhook POST's head, then a byte a second (bench/slow_clients.py), and are
  reopened whenever the web cuts them off: they must hold no web thread (everything here stays clean beside them)
  and be cut off with a 408 (WA_OUTBOX_REQUEST_READ_TIMEOUT);
- a worker is SIGKILLed every 3 s and restarted; the web process is restarted; Postgres is stopped with a fast
  shutdown and started, then crashed (`-m immediate`), and while it is down a 4th worker is started, which must wait
  for it and then work; every process reconnects by itself.
The workers pace sends at --mps (WA_OUTBOX_RATE_LIMIT_MPS); the simulator does not enforce it, so its record shows
what reached "Meta". At the end it audits, prints a report, and exits non-zero on any violation:
- lost: an accepted message not `sent`/`delivered`/`read`/`failed`/`dead`, or an HTTP 202 whose id is not stored;
- sent twice: a message the simulator accepted more than once, unless its outcome was unknowable (it went `unknown`
  and no status webhook came within the window, so the resend policy applied); how each `unknown` was settled;
- dead: exactly the messages to the recipients the simulator refuses permanently, each with its reason;
- webhook updates stored twice (dedup keys, timeline events); signed webhooks lost (every update the simulator
  delivered with a 200 is stored), and every stored event `done`, or `dead` with a reason (only poison ones);
- the rate: more accepted sends than --mps in any sliding second;
- web 5xx (gunicorn's access log: every answer's time, status and duration) from requests that did not overlap the
  seconds Postgres was down.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import queue
import random
import re
import signal
import socket
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

from bench._results import add_json_argument, write  # noqa: E402
from bench.chaos_endpoints import Endpoints, engine_missing, wait_settled  # noqa: E402
from bench.pacing import busiest_window  # noqa: E402
from bench.slow_clients import Tricklers  # noqa: E402
from wa_outbox import InvalidMessage, enqueue, enqueue_many, migrate  # noqa: E402
from wa_outbox.simulator import SimulatorServer  # noqa: E402
from wa_outbox.webhooks import sign  # noqa: E402

SENDER = "100000000000001"
SECRET = "chaos-app-secret"
TOKEN = "chaos-api-token-0123456789"
ACCESS = "chaos-access-token"
PERMANENT = r"77$"    # recipients ending in 77: the simulator refuses them for good (131026)
WORKERS = 3           # killed and restarted in turn; a 4th, started while Postgres is down, is left alone
FINAL = ("sent", "delivered", "read", "failed", "dead")
ENQUEUE_THREADS = 4
TRICKLERS = 20        # slow clients beside the traffic, always this many connected
BATCH = 25            # messages per transaction (SQL function, Python enqueue) or per enqueue_many call
STEPS = ("sent", "delivered", "read")  # the statuses the simulator posts for an accepted message
# The run's clock: the full run keeps production-like windows; --quick (CI) shortens what only adds waiting. Its
# time went to sending at 25/s (40 s for 1,000), the lease of the last killed worker's rows (10 s) and then the
# unknown window (30 s) before they could be settled. The quick run sends at 80/s (the default limit) and keeps
# every timeout above what the faults inject where it must (the 3 s timeout fault still outlasts the send timeout),
# the lease above connect + send + 5 s (config's rule), and the unknown window well above the time a status webhook
# takes to arrive through an outage (Postgres is down at most 4 s, the web a few seconds while it restarts; the
# simulator's retries, doubling from 200 ms, are capped at 1 s so a webhook arrives within a second of the outage).
# 15 s, not 8: once, on a loaded machine, a send that went unknown in the first seconds was settled before any status
# webhook of the run had been stored (the outages and the web's restart come early in a quick run), so the resend
# policy found "no status webhooks arriving for this sender" and dead-lettered it, as it must in a real deployment.
FULL = {"mps": 25.0, "connect_timeout": 1.0, "send_timeout": 2.0, "lease": 10.0, "unknown_window": 30.0,
        "webhook_retry_max_ms": None}
QUICK = {"mps": 80.0, "connect_timeout": 0.5, "send_timeout": 1.5, "lease": 7.5, "unknown_window": 15.0,
         "webhook_retry_max_ms": 1000.0}


# How an `unknown` was settled, by the timeline event that followed it (a status webhook writes `reconciled` and its
# own status in one statement, in either order).
SETTLED_BY = {**dict.fromkeys(("reconciled", "sent", "delivered", "read", "failed"),
                              "a status webhook showed Meta had it: not resent"),
              "requeued": "no status webhook within the window: sent again",
              "dead": "dead (no status webhook, resend not allowed)"}


def recipient(i: int) -> str:
    return f"+55119{i:08d}"


def now() -> float:
    return time.time()


class Postgres:
    """A private embedded Postgres (pgserver), stopped and started on purpose."""

    def __init__(self, directory: Path):
        import pgserver
        from pgserver import _commands
        self.server = pgserver.get_server(str(directory / "pgdata"), cleanup_mode="stop")
        self._pg_ctl = _commands.pg_ctl
        self.pgdata = directory / "pgdata"
        with psycopg.connect(self.server.get_uri(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE chaos")
        self.url = self.server.get_uri("chaos")
        self.down: list[tuple[float, float]] = []  # (stopped at, started again at), unix times

    def _ctl(self, *args: str) -> None:
        self._pg_ctl(["-w", *args], pgdata=self.pgdata, user=self.server.system_user, timeout=60)

    def stop(self) -> None:
        """Stop the server whatever happened (it may have been restarted under another process id)."""
        with contextlib.suppress(Exception):
            self._ctl("-m", "immediate", "stop")
        with contextlib.suppress(Exception):
            self.server.cleanup()

    def outage(self, mode: str, seconds: float, meanwhile=None) -> None:
        """Stop the server (`fast` or `immediate`: a crash), run `meanwhile`, keep it down `seconds`, start it."""
        stopping = now()
        self._ctl("-m", mode, "stop")
        if meanwhile is not None:
            meanwhile()
        time.sleep(seconds)
        self._ctl("restart")  # a stopped server: starts it with the options it last ran with (postmaster.opts)
        self.down.append((stopping, now()))


class Processes:
    def __init__(self, env: dict[str, str], web_port: int, log_dir: Path):
        self.env, self.web_port, self.log_dir = env, web_port, log_dir
        self.web: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.late: subprocess.Popen | None = None  # the worker started while Postgres was down
        self.kills = 0
        self._next_victim = 0
        self._logs: list = []

    def _log(self, name: str):
        handle = open(self.log_dir / f"{name}.log", "a")
        self._logs.append(handle)
        return handle

    def start_web(self) -> None:
        env = {**self.env, "WA_OUTBOX_BIND": f"127.0.0.1:{self.web_port}", "WEB_CONCURRENCY": "2",
               "CHAOS_ACCESS_LOG": str(self.log_dir / "access.log")}
        self.web = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config", "python:bench.chaos_gunicorn",
                                     "wsgi:app"], cwd=ROOT, env=env, stdout=self._log("web"), stderr=subprocess.STDOUT)

    def restart_web(self) -> None:
        self.web.send_signal(signal.SIGTERM)
        self.web.wait(timeout=30)
        self.start_web()
        wait(lambda: self.web_up(), 60, "the web app after its restart")

    def web_up(self) -> bool:
        """Ready, and served by our gunicorn (had it failed to bind, another process could be answering)."""
        if self.web.poll() is not None:
            raise SystemExit(f"chaos: gunicorn exited ({self.web.returncode}); see web.log")
        return web_ready(f"http://127.0.0.1:{self.web_port}")

    def start_worker(self, name: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "worker.py"], cwd=ROOT, env=self.env,
                                stdout=self._log(f"worker-{name}"), stderr=subprocess.STDOUT)

    def start_workers(self) -> None:
        self.workers = [self.start_worker(str(i)) for i in range(WORKERS)]

    def start_late_worker(self) -> None:
        self.late = self.start_worker("late")

    def kill_a_worker(self) -> None:
        index = self._next_victim
        self._next_victim = (index + 1) % len(self.workers)
        self.workers[index].send_signal(signal.SIGKILL)
        self.workers[index].wait()
        self.kills += 1
        self.workers[index] = self.start_worker(str(index))

    def stop(self) -> None:
        everyone = [*self.workers, self.late, self.web]
        for proc in everyone:
            if proc and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in everyone:
            if proc:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for handle in self._logs:
            handle.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
    """Run a database action until it succeeds: Postgres is stopped under our feet on purpose."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return action()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise SystemExit(f"chaos: gave up on {what}") from None
            time.sleep(0.5)


class Enqueuer:
    """Enqueues n messages four ways from a few threads; remembers every id it was given, and what each way did
    with the NUL-bearing texts mixed in."""

    WAYS = ("sql", "python", "bulk", "http")

    def __init__(self, url: str, web_url: str, n: int, nul_per_way: int):
        self.url, self.web_url, self.n = url, web_url, n
        self.ids: set[int] = set()
        self.by_way: collections.Counter[str] = collections.Counter()
        self.nul = {way: collections.Counter() for way in self.WAYS}  # way -> {"refused": k, "accepted": k}
        self.nul_keys: list[str] = []
        self.http_retries = 0
        self.done = 0
        self.problems: list[str] = []
        self._lock = threading.Lock()
        units: list[tuple[str, list[int]]] = []
        quarter = n // 4
        for k, way in enumerate(self.WAYS):
            indexes = list(range(k * quarter, n if way == "http" else (k + 1) * quarter))
            size = 1 if way == "http" else BATCH
            units += [(way, indexes[j:j + size]) for j in range(0, len(indexes), size)]
            units += [(way, [-(k * 1000 + j + 1)]) for j in range(nul_per_way)]  # negative: a NUL-bearing text
        random.Random(1).shuffle(units)
        self._units: queue.Queue = queue.Queue()
        for unit in units:
            self._units.put(unit)

    def run(self) -> None:
        threads = [threading.Thread(target=self._drain, name=f"enqueue-{t}") for t in range(ENQUEUE_THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _drain(self) -> None:
        while True:
            try:
                way, indexes = self._units.get_nowait()
            except queue.Empty:
                return
            if indexes[0] < 0:
                self._nul(way, -indexes[0])
                continue
            ids = getattr(self, f"_{way}")(indexes)
            with self._lock:
                self.ids.update(ids)
                self.by_way[way] += len(indexes)
                self.done += len(indexes)

    @staticmethod
    def _message(i: int) -> dict:
        return {"type": "text", "text": {"body": f"chaos message {i} ✓"}}

    def _sql(self, indexes: list[int]) -> list[int]:
        def once():
            with psycopg.connect(self.url) as conn:  # one transaction, as an app enqueues in its own
                return [conn.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb, %s)", (
                    recipient(i), json.dumps(self._message(i)), f"sql-{i}")).fetchone()[0] for i in indexes]
        return retrying(once, "SELECT wa_outbox.enqueue")

    def _python(self, indexes: list[int]) -> list[int]:
        def once():
            with psycopg.connect(self.url) as conn:
                return [enqueue(conn, to=recipient(i), message=self._message(i), idempotency_key=f"py-{i}")
                        for i in indexes]
        return retrying(once, "enqueue")

    def _bulk(self, indexes: list[int]) -> list[int]:
        items = [{"to": recipient(i), "message": self._message(i), "idempotency_key": f"bulk-{i}"} for i in indexes]

        def once():
            with psycopg.connect(self.url) as conn:
                return enqueue_many(conn, items)
        return retrying(once, "enqueue_many")

    def _post(self, body: dict, key: str) -> requests.Response | None:
        """POST until answered with anything but a 5xx (restarts make 503s and refused connections)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                response = requests.post(f"{self.web_url}/v1/messages", json=body, timeout=10, headers={
                    "Authorization": f"Bearer {TOKEN}", "Idempotency-Key": key})
                if response.status_code < 500:
                    return response
            except requests.RequestException:
                pass
            with self._lock:
                self.http_retries += 1
            time.sleep(0.3)
        return None

    def _http(self, indexes: list[int]) -> list[int]:
        [i] = indexes
        body = {"to": recipient(i), "message": self._message(i)}
        got = set()
        for _ in range(2):  # the client retries once even after a 202: the same key must give the same id
            response = self._post(body, f"http-{i}")
            if response is None or response.status_code != 202:
                self.problems.append(f"HTTP enqueue {i}: " + (
                    "never answered" if response is None else f"{response.status_code} {response.text[:200]}"))
                return sorted(got)
            got.add(response.json()["id"])
        if len(got) != 1:
            self.problems.append(f"HTTP enqueue {i}: one key, ids {sorted(got)}")
        return sorted(got)

    def _nul(self, way: str, k: int) -> None:
        """A text with NUL (Postgres cannot store it): refused by every way, never accepted and then lost."""
        key = f"nul-{way}-{k}"
        message = {"type": "text", "text": {"body": f"nul \u0000 inside {k}"}}
        to = recipient(900_000 + k)
        outcome = "accepted"
        try:
            if way == "http":
                response = self._post({"to": to, "message": message}, key)
                if response is None:
                    outcome = "never answered"
                elif 400 <= response.status_code < 500 and response.headers.get(
                        "Content-Type", "").startswith("application/json"):
                    outcome = "refused"
                elif response.status_code == 202:
                    with self._lock:
                        self.ids.add(response.json()["id"])  # then the audit holds it to be delivered
                else:
                    outcome = f"HTTP {response.status_code}"
            elif way == "bulk":
                with psycopg.connect(self.url) as conn:
                    self.ids.update(enqueue_many(conn, [{"to": to, "message": message, "idempotency_key": key}]))
            elif way == "python":
                with psycopg.connect(self.url) as conn:
                    self.ids.add(enqueue(conn, to=to, message=message, idempotency_key=key))
            else:
                def once():
                    with psycopg.connect(self.url) as conn:
                        try:
                            conn.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb, %s)",
                                         (to, json.dumps(message), key))
                        except psycopg.DataError:
                            return "refused"  # jsonb has no NUL: Postgres itself refuses \u0000
                    return "accepted"
                outcome = retrying(once, "a NUL text through SQL")
        except InvalidMessage:
            outcome = "refused"
        except psycopg.OperationalError:
            outcome = "refused"  # Postgres was down: nothing was written either (the key is checked at the end)
        with self._lock:
            self.nul[way][outcome] += 1
            self.nul_keys.append(key)
        if outcome not in ("refused", "accepted"):
            self.problems.append(f"a NUL text through {way}: {outcome}")


def poison_webhooks() -> tuple[list[dict], list[str]]:
    """Signed, JSON, and hostile: each must be stored and acknowledged, and must never hold back another event.
    Returns the payloads and the dedup keys they must be stored under."""
    def envelope(value: dict) -> dict:
        return {"object": "whatsapp_business_account", "entry": [{"id": "100000000000000", "changes": [
            {"field": "messages", "value": {"messaging_product": "whatsapp",
                                            "metadata": {"display_phone_number": "15550000001",
                                                         "phone_number_id": SENDER}, **value}}]}]}
    stamp = str(int(now()))
    texts = ["nul \u0000 inside", "lone \ud800 surrogate"]
    ids = [f"wamid.POISON{n}{uuid.uuid4().hex[:8]}" for n in range(len(texts))]
    poison = [envelope({"contacts": [{"profile": {"name": "P"}, "wa_id": "5511900000001"}],
                        "messages": [{"from": "5511900000001", "id": wamid, "timestamp": stamp, "type": "text",
                                      "text": {"body": text}}]})
              for wamid, text in zip(ids, texts, strict=True)]
    keys = [f"m:{wamid}" for wamid in ids]
    status_id = f"wamid.POISONSTATUS{uuid.uuid4().hex[:8]}"
    poison.append(envelope({"statuses": [{"id": status_id, "status": "delivered",
                                          "timestamp": "99999999999999999999", "recipient_id": "5511900000002"}]}))
    keys.append(f"s:{status_id}:delivered")
    profile_id = f"wamid.POISONP{uuid.uuid4().hex[:8]}"
    poison.append(envelope({"contacts": [{"profile": "a string", "wa_id": "5511900000003"}],
                            "messages": [{"from": "5511900000003", "id": profile_id, "timestamp": stamp,
                                          "type": "text", "text": {"body": "profile"}}]}))
    keys.append(f"m:{profile_id}")
    return poison, keys


def post_signed(web_url: str, body: bytes) -> int | None:
    try:
        return requests.post(f"{web_url}/webhooks/whatsapp", data=body, timeout=10, headers={
            "Content-Type": "application/json", "X-Hub-Signature-256": sign(SECRET, body)}).status_code
    except requests.RequestException:
        return None


class MethodFlood:
    """Strangers beside the traffic: invented HTTP methods, random paths and query strings, until stopped. `check()`
    then sends one more burst and says how many series it added to /metrics (the labels are bounded: none)."""

    KNOWN = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH")

    def __init__(self, web_url: str):
        self.web_url, self.rng, self.sent, self.invented = web_url, random.Random(17), 0, set()

    def _one(self, http: requests.Session, method: str | None = None, target: str | None = None) -> None:
        if method is None:
            method = f"M{self.rng.getrandbits(40):010X}" if self.rng.random() < 0.6 else self.rng.choice(self.KNOWN)
        self.invented.add(method)
        target = target if target is not None else self.rng.choice(("/healthz", "", "/ops"))
        path = target if target == "/healthz" else f"{target}/x-{self.rng.getrandbits(48):012x}"
        with contextlib.suppress(requests.RequestException):  # through web restarts
            http.request(method, f"{self.web_url}{path}?q{self.rng.getrandbits(16)}={self.rng.getrandbits(32):x}",
                         timeout=10)
            self.sent += 1

    def run(self, stop: threading.Event) -> None:
        with requests.Session() as http:
            while not stop.wait(0.02):
                self._one(http)

    def check(self) -> dict:
        def series(http) -> set[str]:
            text = http.get(f"{self.web_url}/metrics", timeout=30).text
            return {line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}
        with requests.Session() as http:
            for method in (f"M{self.rng.getrandbits(40):010X}", *self.KNOWN):  # every shape once: bounded series
                for target in ("/healthz", "", "/ops"):
                    self._one(http, method, target)
            series(http)  # a scrape counts itself once answered
            before = series(http)
            for _ in range(300):
                self._one(http)
            after = series(http)
        leaked = set(re.findall(r'method="([^"]*)"', "\n".join(after))) & (self.invented - set(self.KNOWN))
        return {"flood_requests": self.sent, "metrics_series": len(after),
                "series_added_by_300_more": len(after - before), "invented_methods_on_metrics": len(leaked)}


MEDIA_KINDS = (("image", "image/jpeg"), ("audio", "audio/ogg"), ("document", "application/pdf"))


class Inbound:
    """Customers writing in (some texts with NUL) and poison webhooks, until stopped."""

    def __init__(self, sim: SimulatorServer, web_url: str):
        self.sim, self.web_url = sim, web_url
        self.keys: list[str] = []         # the dedup keys every acknowledged inbound webhook must be stored under
        self.poison_keys: set[str] = set()
        self.deep_acknowledged = 0        # the body nested too deep has no key: it is stored whole
        self.problems: list[str] = []
        self.media: dict[str, str] = {}   # media id -> the file's sha256 (hex), for every file a customer sent

    def run(self, stop: threading.Event) -> None:
        payloads, keys = poison_webhooks()
        bodies = [(json.dumps(p).encode(), k) for p, k in zip(payloads, keys, strict=True)]
        bodies.append((b'{"object":"whatsapp_business_account","entry":' + b"[" * 10_000 + b"]" * 10_000 + b"}",
                       None))
        n = 0
        while not stop.wait(0.25):
            if n % 5 == 4:  # a file instead of a text (simulator/media.py)
                kind, mime = MEDIA_KINDS[(n // 5) % len(MEDIA_KINDS)]
                sent = self.sim.inbound_media(f"+55219{n:08d}", kind, os.urandom(random.randint(1, 300_000)),
                                              mime_type=mime, filename=f"file-{n}.pdf")
                self.media[sent["media_id"]] = sent["sha256"]
                self.keys.append(f"m:{sent['id']}")
                n += 1
                continue
            text = f"customer message {n}" + (" with \u0000 NUL" if n % 10 == 3 else "")
            wamid = self.sim.inbound(f"+55219{n:08d}", text)
            self.keys.append(f"m:{wamid}")
            if bodies and n % 8 == 0:
                self._post_poison(*bodies.pop())
            n += 1
        while bodies:
            self._post_poison(*bodies.pop())

    def _post_poison(self, body: bytes, key: str | None) -> None:
        for _ in range(120):  # through web restarts and Postgres outages: Meta retries too
            status = post_signed(self.web_url, body)
            if status == 200:
                if key is None:
                    self.deep_acknowledged += 1
                else:
                    self.poison_keys.add(key)
                return
            if status is not None and status != 503:
                self.problems.append(f"poison webhook answered {status}")
                return
            time.sleep(0.5)
        self.problems.append("a poison webhook was never acknowledged")


def read_access_log(path: Path) -> list[tuple[float, int, str, str, float]]:
    """(answered at, status, method, path, started at) per answer."""
    answers = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split(" ", 4)
            if len(parts) == 5 and parts[1].isdigit() and parts[2].isdigit():
                end = float(parts[0])
                answers.append((end, int(parts[1]), parts[3], parts[4], end - int(parts[2]) / 1e6))
    return answers


def during_outage(start: float, end: float, down: list[tuple[float, float]]) -> bool:
    """A request that overlapped the whole seconds Postgres was down (from the second it stopped through the second
    it was back): one that began while it was down may be answered after, on a busy machine."""
    return any(start < math.floor(b) + 1 and end >= math.floor(a) for a, b in down)


def audit(run: dict) -> tuple[list[str], dict]:
    """Every check, from the simulator's record and the database. Returns (violations, figures)."""
    url, sim, enqueuer, inbound = run["url"], run["sim"], run["enqueuer"], run["inbound"]
    problems = list(enqueuer.problems) + inbound.problems
    with psycopg.connect(url) as conn:
        rows = {r[0]: r[1:] for r in conn.execute(
            "SELECT id, status, recipient, last_error FROM wa_outbox.notifications")}
        nul_stored = conn.execute("SELECT count(*) FROM wa_outbox.notifications WHERE idempotency_key = ANY(%s)",
                                  (enqueuer.nul_keys,)).fetchone()[0]
        # How each `unknown` was settled: the event that followed it on the message's timeline.
        unknown_next = collections.Counter()
        for next_event, count in conn.execute(
                "SELECT coalesce(next, '(none yet)'), count(*) FROM ("
                "  SELECT event, lead(event) OVER (PARTITION BY notification_id ORDER BY id) AS next"
                "  FROM wa_outbox.notification_events) e WHERE event = 'unknown' GROUP BY 1"):
            unknown_next[SETTLED_BY.get(next_event, next_event)] += count
        unknown_ids = {r[0] for r in conn.execute(
            "SELECT DISTINCT notification_id FROM wa_outbox.notification_events WHERE event = 'unknown'")}
        resent_on_policy = {r[0] for r in conn.execute(
            "SELECT DISTINCT notification_id FROM wa_outbox.notification_events "
            "WHERE event = 'requeued' AND detail->>'reason' LIKE 'no status webhook within the window%%'")}
        twice_events = conn.execute(
            "SELECT notification_id, event FROM wa_outbox.notification_events "
            "WHERE event IN ('delivered', 'read', 'failed') GROUP BY 1, 2 HAVING count(*) > 1").fetchall()
        timeline_twice = len(twice_events)
        twice_timelines = [conn.execute(
            "SELECT event, attempt, detail, to_char(created_at, 'HH24:MI:SS.MS') FROM wa_outbox.notification_events "
            "WHERE notification_id = %s ORDER BY id", (i,)).fetchall() for i, _ in twice_events[:2]]
        webhook_keys = collections.Counter(r[0] for r in conn.execute("SELECT dedup_key FROM wa_outbox.webhook_events"))
        updates_twice = conn.execute(
            "SELECT count(*) FROM (SELECT wamid, update_status FROM wa_outbox.webhook_events WHERE kind = 'status' "
            "  GROUP BY 1, 2 HAVING count(*) > 1) t").fetchone()[0]
        events = conn.execute("SELECT status, count(*) FROM wa_outbox.webhook_events GROUP BY status").fetchall()
        dead_events = conn.execute(
            "SELECT dedup_key, last_error FROM wa_outbox.webhook_events WHERE status = 'dead'").fetchall()
        claims: dict[int, list[float]] = collections.defaultdict(list)
        for notification_id, at in conn.execute(
                "SELECT notification_id, "
                "coalesce((detail->>'send_at')::float8, extract(epoch FROM created_at)::float8) "
                "FROM wa_outbox.notification_events WHERE event = 'sending' ORDER BY 2"):  # the send slot
            claims[notification_id].append(at)
        late_sends = 0
        if run["late_pid"] is not None:
            late_sends = conn.execute(
                "SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'sending' "
                "AND split_part(detail->>'worker', ':', 2) = %s", (str(run["late_pid"]),)).fetchone()[0]
    figures: dict = {}

    # Lost: every accepted id stored and finished.
    missing = enqueuer.ids - rows.keys()
    if missing:
        problems.append(f"lost: {len(missing)} accepted ids not stored, e.g. {sorted(missing)[:5]}")
    unfinished = [i for i, (status, _, _) in rows.items() if status not in FINAL]
    if unfinished:
        problems.append(f"lost: {len(unfinished)} messages not finished, e.g. {unfinished[:5]}")
    accepted_nul = sum(c["accepted"] for c in enqueuer.nul.values())
    if len(rows) != enqueuer.n + accepted_nul:
        problems.append(f"stored {len(rows)} messages for {enqueuer.n} enqueued (a duplicate enqueue?)")
    if nul_stored != accepted_nul:
        problems.append(f"NUL texts: {nul_stored} stored, {accepted_nul} accepted (a refused one left a trace?)")
    figures["lost"] = len(missing) + len(unfinished)
    figures["statuses"] = dict(collections.Counter(r[0] for r in rows.values()))
    figures["enqueued_by_way"] = dict(enqueuer.by_way)
    figures["nul_texts"] = {way: dict(c) for way, c in enqueuer.nul.items()}
    figures["http_retries"] = enqueuer.http_retries

    # Sent twice, and how each unknown was settled.
    messages = sim.messages()
    received = collections.Counter(int(str(m.get("biz_opaque_callback_data", "")).split(":")[0])
                                   for m in messages if str(m.get("biz_opaque_callback_data", "")).split(":")[0]
                                   .isdigit())
    twice = {i: c for i, c in received.items() if c > 1}
    twice_knowable = {i: c for i, c in twice.items() if i not in resent_on_policy}
    if twice_knowable:
        problems.append(f"sent twice: {len(twice_knowable)} messages whose outcome was knowable, e.g. "
                        f"{list(twice_knowable.items())[:5]}")
    figures["sent_twice_knowable"] = len(twice_knowable)
    figures["sent_twice_unknowable"] = len(twice) - len(twice_knowable)
    figures["unknown_messages"] = len(unknown_ids)
    figures["unknown_settled_by"] = dict(unknown_next)
    unsettled = [i for i in unknown_ids if rows.get(i, ("unknown",))[0] in ("unknown", "sending", "queued")]
    if unsettled:
        problems.append(f"{len(unsettled)} messages that went unknown are still unsettled: {unsettled[:5]}")

    # Dead: exactly the permanent failures, each with its reason.
    permanent = {i for i, (_, to, _) in rows.items() if re.search(PERMANENT, to)}
    dead = {i for i, (status, _, _) in rows.items() if status == "dead"}
    if dead != permanent:
        problems.append(f"dead set differs: {len(dead - permanent)} unexpected (e.g. "
                        f"{[(i, (rows[i][2] or {}).get('message')) for i in sorted(dead - permanent)[:3]]}), "
                        f"{len(permanent - dead)} permanent ones not dead")
    reasons = collections.Counter(f"{(rows[i][2] or {}).get('code')}: {(rows[i][2] or {}).get('message')}"
                                  for i in dead)
    if any(not (rows[i][2] or {}).get("message") for i in dead):
        problems.append("a dead message without its reason")
    figures["dead"], figures["permanent"], figures["dead_reasons"] = len(dead), len(permanent), dict(reasons)
    never_sent = [i for i in rows.keys() - permanent if received[i] == 0 and rows[i][0] != "dead"]
    if never_sent:
        problems.append(f"{len(never_sent)} messages marked sent that the simulator never received: {never_sent[:5]}")

    # Webhooks: every update the simulator delivered is stored, once; every event settled.
    stats = sim.stats()
    webhooks = stats["webhooks"]
    if webhooks["dropped"] or webhooks["pending"]:
        problems.append(f"signed webhooks never acknowledged: {webhooks['dropped']} dropped, "
                        f"{webhooks['pending']} pending")
    expected = {f"s:{m['wamid']}:{step}" for m in messages for step in STEPS} | set(inbound.keys) | \
        inbound.poison_keys
    unstored = expected - webhook_keys.keys()
    if unstored:
        problems.append(f"signed webhooks lost: {len(unstored)} acknowledged updates not stored, "
                        f"e.g. {sorted(unstored)[:3]}")
    stored_twice = sum(c > 1 for c in webhook_keys.values()) + updates_twice + timeline_twice
    if stored_twice:
        problems.append(f"webhook updates stored twice: {updates_twice} status updates, {timeline_twice} "
                        f"timeline events: {twice_events[:5]}, e.g. {twice_timelines}")
    by_status = dict(events)
    for status in ("queued", "processing"):
        if status in by_status:
            problems.append(f"inbound: {by_status[status]} webhook events still {status}")
    if any(not error for _, error in dead_events):
        problems.append("inbound: a dead webhook event without its reason")
    real_dead = [key for key, _ in dead_events if key in expected and key not in inbound.poison_keys]
    if real_dead:
        problems.append(f"inbound: {len(real_dead)} genuine webhook events dead, e.g. {real_dead[:3]}")
    figures.update(webhook_posts=webhooks["posts"], webhook_redeliveries=webhooks["duplicates"],
                   webhook_failed_attempts=webhooks["failed_attempts"], webhook_updates_expected=len(expected),
                   webhook_updates_lost=len(unstored), webhook_events=by_status, stored_twice=stored_twice,
                   webhook_events_dead=len(dead_events), deep_nesting_acknowledged=inbound.deep_acknowledged)

    # Media: every file a customer sent is stored, byte-identical, with one media.ready.
    with psycopg.connect(url) as conn:
        media = {r[0]: r[1:] for r in conn.execute(
            "SELECT meta_media_id, state, encode(sha256, 'hex'), attempts, last_error ->> 'error' "
            "FROM wa_outbox.media")}
        ready = collections.Counter(r[0] for r in conn.execute(
            "SELECT data ->> 'media_id' FROM wa_outbox.events WHERE type = 'media.ready'"))
    # each with its state, its attempts and its last error: a violation says why
    not_stored = {m: (media[m][0], media[m][2], media[m][3]) if m in media else ("missing",)
                  for m in inbound.media if media.get(m, ("missing",))[0] != "stored"}
    if not_stored:
        problems.append(f"media: {len(not_stored)} files not stored, e.g. {sorted(not_stored.items())[:3]}")
    differ = [m for m, digest in inbound.media.items() if m in media and media[m][0] == "stored"
              and media[m][1] != digest]
    if differ:
        problems.append(f"media: {len(differ)} files stored with other bytes, e.g. {differ[:3]}")
    ready_wrong = [m for m in inbound.media if media.get(m, ("",))[0] == "stored" and ready[m] != 1]
    if ready_wrong:
        problems.append(f"media: {len(ready_wrong)} stored files without exactly one media.ready: {ready_wrong[:3]}")
    figures.update(media_files=len(inbound.media), media_stored=sum(v[0] == "stored" for v in media.values()),
                   media_attempts=sum(v[2] for v in media.values()), media_ready_events=sum(ready.values()))

    # The rate, as the workers keep it: the moment each request went (`request_at` on the outcome's timeline event,
    # the database's clock; whatever the answer: a refused or lost request counts at Meta too), per sliding second.
    # This is the promise (docs/rate-limits.md): never more than the rate. A worker SIGKILLed before recording its
    # outcome leaves no moment: the count is a floor.
    with psycopg.connect(url) as conn:
        requested = sorted(r[0] for r in conn.execute(
            "SELECT (detail->>'request_at')::float8 FROM wa_outbox.notification_events WHERE detail ? 'request_at'"))
    sent_most, sent_at = busiest_window(requested)
    if sent_most > run["mps"]:
        problems.append(f"rate exceeded as sent: {sent_most} requests went within one second (ending t+"
                        f"{sent_at - run['t0']:.1f} s), limit {run['mps']:g}/s")
    figures["max_requests_per_sliding_second"] = sent_most
    figures["requests_with_their_moment"] = len(requested)

    # The simulator's record of accepted sends, per sliding second: the requests' moments plus the delay to it.
    accepted = sorted(m["received_at"] for m in messages)
    most, most_at = busiest_window(accepted)
    granted, _ = busiest_window(sorted(t for times in claims.values() for t in times))  # a claim takes a token
    delays = sorted(d for m in messages if (d := claim_to_arrival(m, claims)) is not None)
    # The schedule's promise (wa_outbox/sql/schema.sql, reserve_slots): send slots at least 1/R apart,
    # R = 0.985 mps, and no send before its slot, so a one-second window at Meta's end holds at most 1 + R (1 + J)
    # sends when each arrives up to J after its slot: <= mps while J stays under 15 ms (a worker gives a row back
    # rather than send it more than 10 ms late). On a machine this busy J is larger now and then (measured below),
    # and one more can land in a window: that is reported (the headline's "met"); a violation is more than the
    # schedule allows for the delays measured.
    rate = 0.985 * run["mps"]
    bound = math.floor(1 + rate * (1 + (delays[-1] if delays else 0.0)))
    if most > bound:
        problems.append(f"rate exceeded: {most} sends accepted within one second (ending t+{most_at - run['t0']:.1f} "
                        f"s), limit {run['mps']:g}/s; at most {bound} allowed for sends taking up to "
                        f"{delays[-1] if delays else 0:.3f} s from their claim to the simulator")
    figures["rate_bound_for_measured_delays"] = bound
    figures["max_per_sliding_second"] = most
    figures["max_claims_per_sliding_second"] = granted
    figures["claim_to_arrival_seconds"] = {
        q: round(delays[min(len(delays) - 1, int(len(delays) * q / 100))], 3) for q in (50, 90, 99, 100)
    } if delays else {}
    figures["sim_outcomes"] = stats["outcomes"]
    figures["injected_130429"] = run["injected_130429"]()

    # The web: no 5xx outside the seconds Postgres was down.
    answers = read_access_log(run["access_log"])
    errors = [a for a in answers if a[1] >= 500]
    outside = [a for a in errors if not during_outage(a[4], a[0], run["down"])]
    if not answers:
        problems.append("the web's access log is empty: cannot check its answers")
    if outside:
        problems.append(f"web 5xx outside the seconds Postgres was down: {len(outside)}, e.g. "
                        f"{[(round(t - run['t0'], 1), s, m, p) for t, s, m, p, _ in outside[:5]]}")
    figures.update(web_answers=len(answers), web_5xx=len(errors), web_5xx_outside_outages=len(outside),
                   web_statuses=dict(collections.Counter(str(a[1]) for a in answers)))

    # The worker started while Postgres was down waited for it, then worked.
    figures["late_worker_sends"] = late_sends
    if run["late_pid"] is None or not late_sends:
        problems.append("the worker started while Postgres was down never claimed a message")
    if run["late_exit"] is not None:
        problems.append(f"the worker started while Postgres was down exited ({run['late_exit']})")

    # The slow clients were cut off by the read deadline (a restart of the web cuts them off without one).
    tricklers = run["tricklers"]
    figures["tricklers"] = {"opened": tricklers.opened, "cut_off": tricklers.cut_off,
                            "answered_408": tricklers.answered_408}
    if not tricklers.answered_408:
        problems.append(f"no trickling connection was answered 408 ({tricklers.cut_off} cut off without it)")

    figures["series"] = per_second_series(run["t0"], accepted, errors)
    return problems, figures


def claim_to_arrival(message: dict, claims: dict[int, list[float]]) -> float | None:
    """Seconds from the send slot of the claim that sent `message` (the last claim of its outbox id before it
    arrived) to its arrival at the simulator; None when unknown. The outbox id is the biz_opaque_callback_data a worker
    sent."""
    head = str(message.get("biz_opaque_callback_data") or "").split(":")[0]
    times = claims.get(int(head)) if head.isdigit() else None
    if not times:
        return None
    before = [t for t in times if t <= message["received_at"] + 0.005]
    return message["received_at"] - before[-1] if before else None


def per_second_series(t0: float, accepted: list[float], errors: list) -> dict:
    sends = collections.Counter(int(t - t0) for t in accepted)
    fives = collections.Counter(int(a[0] - t0) for a in errors)
    last = max([*sends, *fives, 0])
    return {"sends": [[s, sends.get(s, 0)] for s in range(last + 1)],
            "web_5xx": [[s, fives.get(s, 0)] for s in range(last + 1)]}


def delivery_rows(d: dict, row) -> list[dict]:
    """The endpoints' headline rows (none when the build has no delivery engine: the run says why it skipped)."""
    if "skipped" in d:
        return []
    flaky, ordered = d["flaky"], d["ordered"]
    rows = []
    for name, e in (("flaky", flaky), ("ordered", ordered)):
        rows.append(row(f"events lost at the {name} endpoint, of {e['matching_events']:,} matching "
                        f"({e['arrivals']:,} arrivals: {e['answers']})", e["lost"], "= 0", e["lost"] == 0,
                        unit="events"))
        rows.append(row(f"events delivered more than once to the {name} endpoint (at least once allows it)",
                        e["duplicate_events"], None, None, unit="events"))
    unverified = flaky["unverified"] + ordered["unverified"] + flaky["mismatched"] + ordered["mismatched"]
    rows.append(row("deliveries standardwebhooks does not verify, or not their event's row", unverified, "= 0",
                    unverified == 0, unit="deliveries"))
    rows.append(row(f"arrivals out of their conversation's order at the ordered endpoint "
                    f"({ordered['conversations']:,} conversations)", ordered["order_violations"], "= 0",
                    ordered["order_violations"] == 0 and ordered["in_flight_together"] == 0, unit="arrivals"))
    return rows


def delivery_table(d: dict) -> list[dict]:
    if "skipped" in d:
        return []
    keys = ("matching_events", "delivered_events", "lost", "duplicate_events", "duplicate_deliveries", "arrivals",
            "unverified", "mismatched", "unexpected", "not_dispatched", "attempts_recorded")
    return [{"title": "Chaos run: event deliveries per endpoint (the receivers' records against wa_outbox.events)",
             "columns": ["endpoint", *keys, "answers"],
             "rows": [[name, *(d[name][k] for k in keys), json.dumps(d[name]["answers"], sort_keys=True)]
                      for name in ("flaky", "ordered")]}]


def results_for_json(args, n: int, elapsed: float, procs: Processes, pg: Postgres, timeline: list,
                     problems: list[str], f: dict) -> dict:
    def row(what, value, goal, met, unit="messages", reference=None, reference_name=None):
        ratio = round(value / reference, 3) if reference else None
        return {"what": what, "unit": unit, "value": value, "reference": reference,
                "reference_name": reference_name, "ratio": ratio, "goal": goal, "met": met}
    unknown, flood = f["unknown_messages"], f["metrics_flood"]
    headline = [
        row(f"lost, of {n:,} enqueued (SQL, Python, enqueue_many, HTTP)", f["lost"], "= 0", f["lost"] == 0),
        row("sent twice, outcome knowable", f["sent_twice_knowable"], "= 0", f["sent_twice_knowable"] == 0),
        row("went through unknown (each settled: see the table)", unknown, "all settled",
            not any("unsettled" in p for p in problems)),
        row("dead", f["dead"], "= the permanent failures", f["dead"] == f["permanent"], reference=f["permanent"],
            reference_name="messages the simulator refused permanently (131026)"),
        row("webhook updates stored twice", f["stored_twice"], "= 0", f["stored_twice"] == 0, unit="updates"),
        row(f"signed webhook updates lost, of {f['webhook_updates_expected']:,} acknowledged",
            f["webhook_updates_lost"], "= 0", f["webhook_updates_lost"] == 0, unit="updates"),
        row("most requests in any sliding second, as sent (the promise)", f["max_requests_per_sliding_second"],
            "<= the limit", f["max_requests_per_sliding_second"] <= args.mps, unit="requests", reference=args.mps,
            reference_name="configured rate limit (WA_OUTBOX_RATE_LIMIT_MPS)"),
        row("most sends accepted in any sliding second at the simulator (on a machine this busy, its own delays "
            "add: see the schedule's bound)", f["max_per_sliding_second"], "<= the bound for the delays measured",
            f["max_per_sliding_second"] <= f["rate_bound_for_measured_delays"], unit="sends",
            reference=f["rate_bound_for_measured_delays"],
            reference_name="what the schedule allows for the slot-to-arrival delays measured"),
        row(f"web 5xx outside the seconds Postgres was down (of {f['web_answers']:,} answers; "
            f"{f['web_5xx']} while it was down)", f["web_5xx_outside_outages"], "= 0",
            f["web_5xx_outside_outages"] == 0, unit="answers"),
        row("sends by the worker started while Postgres was down", f["late_worker_sends"], "> 0",
            f["late_worker_sends"] > 0, unit="claims"),
        row(f"/metrics series added by 300 invented methods, paths, queries (of {flood['metrics_series']})",
            flood["series_added_by_300_more"], "= 0", flood["series_added_by_300_more"] == 0, unit="series"),
        row(f"trickling connections cut off with a 408 ({TRICKLERS} connected throughout)",
            f["tricklers"]["answered_408"], "> 0", f["tricklers"]["answered_408"] > 0, unit="connections"),
        row("workers SIGKILLed", procs.kills, None, None, unit="kills"),
    ]
    headline += delivery_rows(f["deliveries"], row)
    t0 = timeline[0][0] if timeline else 0
    plots = [{"name": "chaos-sends-per-second", "title": f"Chaos run: sends accepted per second, limit {args.mps:g}/s",
              "x_label": "seconds into the run", "y_label": "per second", "kind": "line",
              "series": {"sends accepted by the simulator": f["series"]["sends"],
                         "limit": [[0, args.mps], [f["series"]["sends"][-1][0], args.mps]],
                         "web 5xx": f["series"]["web_5xx"]}}]
    tables = [
        {"title": "Chaos run: what happened when", "columns": ["t (s)", "event"],
         "rows": [[round(t - t0, 1), label] for t, label in timeline]},
        {"title": "Chaos run: how each unknown outcome was settled (the timeline event after it)",
         "columns": ["settled by", "messages"], "rows": sorted(f["unknown_settled_by"].items())},
        {"title": "Chaos run: dead letters and their reasons", "columns": ["reason", "messages"],
         "rows": sorted(f["dead_reasons"].items())},
        {"title": "Chaos run: texts with NUL, by enqueue path", "columns": ["path", "refused", "accepted"],
         "rows": [[way, c.get("refused", 0), c.get("accepted", 0)] for way, c in f["nul_texts"].items()]},
        {"title": "Chaos run: the simulator's answers", "columns": ["outcome", "count"],
         "rows": sorted(f["sim_outcomes"].items())},
        *delivery_table(f["deliveries"]),
    ]
    return {"headline": headline, "plots": plots, "tables": tables, "messages": n, "seconds": round(elapsed, 1),
            "violations": problems, "mps": args.mps, "kills": procs.kills,
            "postgres_down": [[round(a - t0, 2), round(b - t0, 2)] for a, b in pg.down],
            **{k: v for k, v in f.items() if k != "series"}, "series": f["series"]}


def fire_and_audit(args, n: int, pg: Postgres, directory: Path, timeline: list, happened):
    """Start everything, enqueue under fire, settle, audit. Returns (figures, violations, processes, version)."""
    clock = QUICK if args.quick else FULL
    migrate.upgrade(pg.url)
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("INSERT INTO wa_outbox.settings VALUES ('default_phone_number_id', %s)", (SENDER,))
        pg_version = conn.execute("SHOW server_version").fetchone()[0]
    skipped = engine_missing()  # no events engine or no delivery threads in this build: the run has no endpoints
    endpoints = None if skipped else Endpoints(pg.url, directory)
    web_port = free_port()  # never a fixed one: another run on this machine must not answer our requests
    web_url = f"http://127.0.0.1:{web_port}"
    throttles = max(3, n // 1000)  # each 130429 pauses the sender 2 s: a few, not 1 % of all sends
    faults = [{"mode": "error", "code": 131026, "match": {"to": PERMANENT}},
              {"mode": "http_error", "status": 503, "rate": 0.04},
              {"mode": "error", "code": 131000, "rate": 0.04},
              {"mode": "timeout", "ms": 3000, "rate": 0.01},
              {"mode": "lost_response", "rate": 0.03},
              {"mode": "error", "code": 130429, "rate": 0.01, "count": throttles},
              {"mode": "error", "code": 131056, "rate": 0.01},
              # media (simulator/media.py): their own routes
              {"mode": "http_error", "status": 503, "rate": 0.2, "match": {"route": "media_lookup"}},
              {"mode": "expired_url", "rate": 0.1, "match": {"route": "media_lookup"}},
              {"mode": "wrong_sha256", "rate": 0.05, "match": {"route": "media_lookup"}},
              {"mode": "http_error", "status": 500, "rate": 0.1, "match": {"route": "media_download"}}]
    with SimulatorServer(access_token=ACCESS, app_secret=SECRET, webhook_url=f"{web_url}/webhooks/whatsapp",
                         faults=faults, seed=11, status_delays_ms=(30, 60, 90), duplicate_rate=1.0,
                         duplicate_max=3, reorder_rate=0.3, batch_rate=0.3, webhook_max_batch=20,
                         webhook_max_attempts=40, webhook_retry_ms=200,
                         webhook_retry_max_ms=clock["webhook_retry_max_ms"]) as sim:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
        env.update(DATABASE_URL=pg.url, WHATSAPP_APP_SECRET=SECRET, WHATSAPP_VERIFY_TOKEN="chaos-verify",
                   WA_OUTBOX_API_TOKENS=TOKEN, WHATSAPP_ACCESS_TOKEN=ACCESS, WHATSAPP_PHONE_NUMBER_ID=SENDER,
                   WHATSAPP_API_BASE_URL=sim.base_url, WA_OUTBOX_POLL_INTERVAL="0.2",
                   WA_OUTBOX_RATE_LIMIT_MPS=f"{args.mps:g}",
                   WA_OUTBOX_CONNECT_TIMEOUT=f"{clock['connect_timeout']:g}",
                   WA_OUTBOX_SEND_TIMEOUT=f"{clock['send_timeout']:g}", WA_OUTBOX_LEASE_SECONDS=f"{clock['lease']:g}",
                   WA_OUTBOX_RETRY_BASE_SECONDS="0.2", WA_OUTBOX_RETRY_MAX_SECONDS="2",
                   WA_OUTBOX_UNKNOWN_WINDOW_SECONDS=f"{clock['unknown_window']:g}", WA_OUTBOX_WORKER_CONCURRENCY="16",
                   WA_OUTBOX_SHUTDOWN_GRACE="5", LOG_LEVEL="WARNING")
        if endpoints is not None:
            env.update(endpoints.env())
        procs = Processes(env, web_port, directory)
        happened("start")
        procs.start_web()
        wait(procs.web_up, 60, "the web app")
        procs.start_workers()
        enqueuer = Enqueuer(pg.url, web_url, n, nul_per_way=3)
        inbound = Inbound(sim, web_url)
        stop = threading.Event()
        enqueuing = threading.Thread(target=enqueuer.run, name="enqueue")
        customers = threading.Thread(target=inbound.run, args=(stop,), name="inbound")
        flood = MethodFlood(web_url)
        strangers = threading.Thread(target=flood.run, args=(stop,), name="method-flood")
        enqueuing.start()
        customers.start()
        strangers.start()
        tricklers = Tricklers(web_port, TRICKLERS)
        problems: list[str] = []
        enqueued_at: list[float] = []
        try:
            def queued() -> int:
                with psycopg.connect(pg.url, connect_timeout=2) as conn:
                    return conn.execute("SELECT count(*) FROM wa_outbox.notifications "
                                        "WHERE status = 'queued'").fetchone()[0]

            # The fire, at fractions of the enqueueing: the web restarted, Postgres stopped (fast) and
            # crashed, with a worker started while it is down; a worker SIGKILLed every 3 s until drained.
            fire = [(0.15, "web restarted", procs.restart_web),
                    (0.35, "postgres stopped (fast) for 2 s and started",
                     lambda: pg.outage("fast", 2.0)),
                    (0.6, "postgres crashed (immediate) for 4 s, a worker started meanwhile, and started",
                     lambda: pg.outage("immediate", 4.0, procs.start_late_worker))]
            next_kill = time.monotonic() + 3
            while True:
                time.sleep(0.25)
                if fire and enqueuer.done >= fire[0][0] * n:
                    _, label, action = fire.pop(0)
                    action()
                    happened(label)
                if not enqueuing.is_alive() and not enqueued_at:
                    enqueued_at.append(now())
                    happened(f"all {n:,} enqueued")
                if time.monotonic() >= next_kill:
                    next_kill = time.monotonic() + 3
                    # Until the backlog is nearly gone: each kill leaves sends unknown for up to a window.
                    if enqueuing.is_alive() or fire or retrying(queued, "the queue depth") > n // 50:
                        procs.kill_a_worker()
                    else:
                        break
            enqueuing.join()
            happened(f"{procs.kills} workers killed; now settling")
            stop.set()
            customers.join()
            strangers.join()
            tricklers.close()

            def settled() -> bool:
                # The simulator first, then the database, then the simulator again, unchanged: a send accepted or a
                # webhook stored between two looks would otherwise pass for settled while its webhooks are on the way.
                before = (len(sim.messages()), sim.stats()["webhooks"]["posts"])
                if not sim.wait_for_webhooks_idle(0.1):
                    return False
                try:
                    with psycopg.connect(pg.url) as conn:
                        pending = conn.execute(
                            "SELECT (SELECT count(*) FROM wa_outbox.notifications "
                            "        WHERE status IN ('queued', 'sending', 'unknown'))"
                            "     + (SELECT count(*) FROM wa_outbox.webhook_events "
                            "        WHERE status IN ('queued', 'processing'))"
                            "     + (SELECT count(*) FROM wa_outbox.media WHERE state IN ('pending', 'fetching'))"
                            ).fetchone()[0]
                except psycopg.OperationalError:
                    return False
                return pending == 0 and sim.wait_for_webhooks_idle(0.1) and \
                    (len(sim.messages()), sim.stats()["webhooks"]["posts"]) == before
            with contextlib.suppress(SystemExit):
                wait(settled, args.timeout, "every message and webhook event settled")
            happened("settled")
            if endpoints is not None:
                delivered = wait_settled(endpoints, args.timeout, retrying)
                happened("every event delivered to both endpoints" if delivered else
                         "timed out waiting for the endpoints' deliveries")

            def injected_130429() -> int:
                [rule] = [r for r in sim.faults() if r.get("code") == 130429]
                return throttles - rule["remaining"]
            run = {"url": pg.url, "sim": sim, "enqueuer": enqueuer, "inbound": inbound, "mps": args.mps,
                   "access_log": directory / "access.log", "down": pg.down, "t0": timeline[0][0],
                   "late_pid": procs.late.pid if procs.late else None,
                   "late_exit": procs.late.poll() if procs.late else None, "injected_130429": injected_130429,
                   "tricklers": tricklers}
            problems, figures = audit(run)
            figures["metrics_flood"] = flooded = flood.check()
            if flooded["series_added_by_300_more"] or flooded["invented_methods_on_metrics"]:
                problems.append(f"/metrics grew under the method flood: {flooded}")
            if endpoints is None:
                figures["deliveries"] = {"skipped": skipped}
            else:
                more, figures["deliveries"] = endpoints.audit()
                problems += more
        finally:
            stop.set()
            tricklers.close()
            procs.stop()
            if endpoints is not None:
                endpoints.stop()
    return figures, problems, procs, pg_version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000, help="messages (default 10,000)")
    parser.add_argument("--mps", type=float, default=None,
                        help="the rate limit the workers keep (default 25/s; --quick: 80/s)")
    parser.add_argument("--quick", action="store_true",
                        help="1,000 messages at 80/s, shorter lease and unknown window: the short version CI runs")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the queue to settle")
    add_json_argument(parser)
    args = parser.parse_args()
    n = 1000 if args.quick else args.n
    if args.mps is None:
        args.mps = (QUICK if args.quick else FULL)["mps"]
    started = time.monotonic()
    timeline: list[tuple[float, str]] = []

    def happened(label: str) -> None:
        timeline.append((now(), label))
        print(f"chaos: t+{now() - timeline[0][0]:.0f}s {label}", flush=True)

    with tempfile.TemporaryDirectory(prefix="wa-outbox-chaos-") as tmp:
        directory = Path(tmp)
        os.chmod(directory, 0o755)  # pgserver runs the server as its own user when we are root
        pg = Postgres(directory)
        try:
            figures, problems, procs, pg_version = fire_and_audit(args, n, pg, directory, timeline, happened)
        finally:
            pg.stop()
    elapsed = time.monotonic() - started
    report(n, elapsed, procs, pg, timeline, problems, figures, args)
    facts = (f"embedded Postgres {pg_version} (pgserver), gunicorn 2 × gthread, {WORKERS} + 1 workers × 16, "
             f"rate limit {args.mps:g}/s, {os.cpu_count()} cores shared with everything else")
    write(args.json, "chaos", results_for_json(args, n, elapsed, procs, pg, timeline, problems, figures),
          facts=facts)
    if problems:
        for problem in problems:
            print(f"chaos: VIOLATION {problem}")
        raise SystemExit(1)
    print("chaos: no violation")


def report(n, elapsed, procs, pg, timeline, problems, f, args) -> None:
    t0 = timeline[0][0]
    print(f"chaos: {n:,} messages in {elapsed:.0f} s; enqueued by " +
          ", ".join(f"{w} {c:,}" for w, c in f["enqueued_by_way"].items()) +
          f" ({f['http_retries']} HTTP retries through restarts); {procs.kills} workers SIGKILLed; Postgres down " +
          ", ".join(f"t+{a - t0:.1f}–{b - t0:.1f}s" for a, b in pg.down))
    print("chaos: statuses: " + ", ".join(f"{s} {c:,}" for s, c in sorted(f["statuses"].items())) +
          f"; lost {f['lost']}")
    print(f"chaos: sent twice: {f['sent_twice_knowable']} with a knowable outcome, "
          f"{f['sent_twice_unknowable']} resent on the unknown policy; {f['unknown_messages']} went unknown, "
          "settled by: " + ", ".join(f"{k} {v}" for k, v in sorted(f["unknown_settled_by"].items())))
    print(f"chaos: dead {f['dead']} = permanent {f['permanent']}? {f['dead'] == f['permanent']}; reasons: " +
          "; ".join(f"{r} ({c})" for r, c in f["dead_reasons"].items()))
    print("chaos: NUL texts: " + ", ".join(f"{w} {dict(c)}" for w, c in f["nul_texts"].items()))
    print(f"chaos: webhooks: {f['webhook_posts']:,} POSTs by the simulator ({f['webhook_redeliveries']:,} "
          f"redeliveries, {f['webhook_failed_attempts']} failed attempts), {f['webhook_updates_expected']:,} updates "
          f"acknowledged, {f['webhook_updates_lost']} not stored, {f['stored_twice']} stored twice; events " +
          ", ".join(f"{s} {c:,}" for s, c in sorted(f["webhook_events"].items())))
    print(f"chaos: rate as sent: at most {f['max_requests_per_sliding_second']} requests in any sliding second of the "
          f"moments they went, limit {args.mps:g}/s ({f['requests_with_their_moment']:,} requests with their moment)")
    print(f"chaos: rate: at most {f['max_per_sliding_second']} sends accepted in any sliding second, limit "
          f"{args.mps:g}/s (the schedule allows {f['rate_bound_for_measured_delays']} for the delays measured; at most "
          f"{f['max_claims_per_sliding_second']} slots); from slot to the simulator "
          f"{f['claim_to_arrival_seconds']} s by percentile; {f['injected_130429']} 130429 injected")
    print(f"chaos: web: {f['web_answers']:,} answers, {f['web_5xx']} 5xx, {f['web_5xx_outside_outages']} outside "
          f"the outages; statuses {f['web_statuses']}")
    print(f"chaos: the worker started while Postgres was down claimed {f['late_worker_sends']} sends")
    print(f"chaos: method flood: {f['metrics_flood']['flood_requests']:,} requests with invented methods, random paths "
          f"and queries; /metrics has {f['metrics_flood']['metrics_series']} series, 300 more added "
          f"{f['metrics_flood']['series_added_by_300_more']}")
    print(f"chaos: {TRICKLERS} trickling connections throughout: {f['tricklers']['opened']} opened, "
          f"{f['tricklers']['cut_off']} cut off by the web, {f['tricklers']['answered_408']} of them with a 408")
    d = f["deliveries"]
    if "skipped" in d:
        print(f"chaos: endpoints: skipped ({d['skipped']})")
        return
    print("chaos: events: " + ", ".join(f"{t} {c:,}" for t, c in sorted(d["events_by_type"].items())))
    for name in ("flaky", "ordered"):
        e = d[name]
        print(f"chaos: endpoint {name}{' (ordered)' if e['ordered'] else ''}: {e['matching_events']:,} matching "
              f"events, {e['delivered_events']:,} delivered, {e['lost']} lost, {e['duplicate_events']} delivered "
              f"more than once ({e['duplicate_deliveries']} extra); {e['arrivals']:,} arrivals answered "
              f"{e['answers']} ({e['aborted_mid_body']} cut off mid-body by a SIGKILL); "
              f"{e['unverified']} not verified by standardwebhooks, {e['mismatched']} not their "
              f"event's row, {e['unexpected']} outside the filter" +
              (f"; {e['conversations']} conversations, {e['order_violations']} out of order, "
               f"{e['in_flight_together']} overlapping" if e["ordered"] else ""))


if __name__ == "__main__":
    main()
