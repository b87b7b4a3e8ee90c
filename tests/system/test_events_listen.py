"""`wa-outbox events listen` as a developer runs it: a real process on a real port, real POSTs signed by the Standard
Webhooks reference library (`standardwebhooks`), each verified delivery printed, every other one refused with 401.

The first test has a real worker (`wa-outbox worker`) deliver to a listener that registered its own endpoint. The
others sign with the Python library's Webhook.sign over events.envelope_bytes (the code path the workers' deliveries
use) so that they can forge, alter and garble deliveries.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import requests
from standardwebhooks import Webhook

from tests.endpoint_rows import add_events
from tests.live import wait_for
from tests.processes import cli_worker, free_port, push_env
from wa_outbox import events
from wa_outbox.endpoints import new_secret
from wa_outbox.secret_box import SecretBox, generate_key

ROOT = Path(__file__).resolve().parents[2]
KEY = generate_key()


class Listening:
    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc, self.port = proc, port
        self.url = f"http://127.0.0.1:{port}/"
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.readers = [threading.Thread(target=lambda s=stream, i=into: i.extend(iter(s.readline, "")), daemon=True)
                        for stream, into in ((proc.stdout, self.stdout), (proc.stderr, self.stderr))]
        for reader in self.readers:
            reader.start()


@contextlib.contextmanager
def listen(*args: str, env: dict[str, str] | None = None, port: int | None = None) -> Iterator[Listening]:
    port = port or free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    proc = subprocess.Popen([sys.executable, "-m", "wa_outbox.cli", "events", "listen", "--port", str(port), *args],
                            cwd=ROOT, env={**base, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    listening = Listening(proc, port)
    try:
        def up() -> bool:
            assert proc.poll() is None, "".join(listening.stderr)
            try:
                return requests.get(listening.url, timeout=5).status_code == 405
            except requests.ConnectionError:
                return False
        wait_for(up, timeout=60, interval=0.1, what="the listener to answer")
        yield listening
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def envelope(seq: int, type_: str = "message.received", data: dict | None = None) -> bytes:
    return events.envelope_bytes(seq, type_, datetime.datetime.now(datetime.UTC),
                                 data or {"schema_version": 1, "from": "5511987654321", "text": {"body": "Olá"}})


def deliver(url: str, secret: str, body: bytes, *, msg_id: str | None = None, tamper: bool = False):
    msg_id = msg_id or json.loads(body)["id"]
    now = datetime.datetime.now(datetime.UTC)
    signature = Webhook(secret).sign(msg_id, now, body.decode())
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(int(now.timestamp())),
               "webhook-signature": signature, "Content-Type": "application/json"}
    return requests.post(url, data=body + (b" " if tamper else b""), headers=headers, timeout=10)


def test_a_worker_delivers_to_the_listener_which_prints_each_verified_event(database_url, db):
    env = {"DATABASE_URL": database_url, "WA_OUTBOX_SECRET_KEY": KEY, "WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE": "true"}
    with listen(env=env) as listening, cli_worker(push_env(database_url, KEY)):
        [endpoint_id] = [r[0] for r in db.execute("SELECT id FROM wa_outbox.endpoints WHERE url = %s",
                                                  (listening.url,))]
        seqs = add_events(db, 2) + add_events(db, 1, type_="message.status")
        wait_for(lambda: len(listening.stdout) >= 3, timeout=120, what="three printed events")
        wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.deliveries WHERE endpoint_id = %s AND "
                                    "status = 'delivered'", (endpoint_id,)).fetchone()[0] == 3, timeout=60,
                 what="three deliveries recorded")
    printed = sorted(listening.stdout, key=lambda line: int(line.split()[2].removeprefix("evt_")))
    assert [line.split()[1:3] for line in printed] == [["message.received", events.event_id(seqs[0])],
                                                      ["message.received", events.event_id(seqs[1])],
                                                      ["message.status", events.event_id(seqs[2])]]
    assert all("olá ✓" in line for line in printed) and len(listening.stdout) == 3
    # each verified at its first try (a delivery the listener refuses is answered 401, then retried)
    codes = db.execute("SELECT array_agg(a.status_code) FROM wa_outbox.delivery_attempts a JOIN wa_outbox.deliveries "
                       "d ON d.id = a.delivery_id WHERE d.endpoint_id = %s", (endpoint_id,)).fetchone()[0]
    assert codes == [200, 200, 200]


def test_verified_deliveries_are_printed_and_others_refused():
    secret = new_secret()
    with listen("--secret", secret) as listening:
        assert deliver(listening.url, secret, envelope(1)).status_code == 200
        assert deliver(listening.url, secret, envelope(2, "message.status", {"schema_version": 1,
                                                                          "status": "read"})).status_code == 200
        assert deliver(listening.url, secret, envelope(3), tamper=True).status_code == 401
        assert deliver(listening.url, new_secret(), envelope(4)).status_code == 401  # another endpoint's secret
        assert requests.post(listening.url, data=envelope(5), timeout=10).status_code == 401  # unsigned
        garbled = {"webhook-id": "evt_6", "webhook-timestamp": "soon", "webhook-signature": "v1"}
        assert requests.post(listening.url, data=envelope(6), headers=garbled, timeout=10).status_code == 401
        wait_for(lambda: len(listening.stdout) >= 2, timeout=30, what="two lines")
    lines = listening.stdout
    assert len(lines) == 2, lines
    assert "message.received" in lines[0] and "evt_1" in lines[0] and "Olá" in lines[0]
    assert "message.status" in lines[1] and "evt_2" in lines[1]
    assert secret not in "".join(listening.stdout + listening.stderr)


def test_json_prints_the_envelope_as_delivered():
    secret = new_secret()
    with listen("--secret", secret, "--json") as listening:
        body = envelope(7)
        assert deliver(listening.url, secret, body).status_code == 200
        wait_for(lambda: listening.stdout, timeout=30, what="a line")
    assert json.loads(listening.stdout[0]) == json.loads(body)


def test_without_a_secret_it_registers_its_endpoint_then_reuses_it(database_url, db):
    env = {"DATABASE_URL": database_url, "WA_OUTBOX_SECRET_KEY": KEY, "WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE": "true"}
    port = free_port()
    with listen(env=env, port=port) as listening:
        found = db.execute("SELECT id, secret_enc, event_types FROM wa_outbox.endpoints WHERE url = %s",
                           (listening.url,)).fetchone()
        assert found is not None and found[2] is None  # every event type
        endpoint_id, secret = found[0], SecretBox([KEY]).decrypt(found[1])
        assert deliver(listening.url, secret, envelope(8)).status_code == 200
        assert deliver(listening.url, new_secret(), envelope(9)).status_code == 401
        wait_for(lambda: listening.stdout, timeout=30, what="a line")
        wait_for(lambda: any(endpoint_id in line for line in listening.stderr), timeout=30, what="the id")
    assert "evt_8" in listening.stdout[0] and len(listening.stdout) == 1
    assert f"endpoint {endpoint_id} registered for {listening.url}" in "".join(listening.stderr)
    assert secret not in "".join(listening.stdout + listening.stderr)

    db.execute("UPDATE wa_outbox.endpoints SET state = 'disabled', disabled_reason = 'failing', disabled_at = now()")
    with listen(env=env, port=port) as again:
        wait_for(lambda: any("enabled again" in line for line in again.stderr), timeout=30, what="the reuse")
        assert deliver(again.url, secret, envelope(10)).status_code == 200
    assert db.execute("SELECT count(*), min(state) FROM wa_outbox.endpoints").fetchone() == (1, "enabled")


def test_without_a_secret_it_needs_private_addresses_allowed(database_url, db):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    done = subprocess.run([sys.executable, "-m", "wa_outbox.cli", "events", "listen", "--port", str(free_port())],
                          cwd=ROOT, env={**base, "DATABASE_URL": database_url, "WA_OUTBOX_SECRET_KEY": KEY},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE=true" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert db.execute("SELECT count(*) FROM wa_outbox.endpoints").fetchone()[0] == 0


def test_a_malformed_secret_is_refused_in_one_line():
    done = subprocess.run([sys.executable, "-m", "wa_outbox.cli", "events", "listen", "--port", str(free_port()),
                           "--secret", "whsec_!!"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "whsec_" in done.stderr and "Traceback" not in done.stderr


def test_sigterm_and_ctrl_c_stop_the_listener_cleanly():
    """Either stop signal ends `events listen` at once, after serving: exit status 0, no traceback."""
    secret = new_secret()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with listen("--secret", secret) as listening:
            assert deliver(listening.url, secret, envelope(1)).status_code == 200
            listening.proc.send_signal(signum)
            assert listening.proc.wait(timeout=30) == 0, "".join(listening.stderr)
        for reader in listening.readers:  # to the end of its output
            reader.join(timeout=10)
        assert "Traceback" not in "".join(listening.stderr), "".join(listening.stderr)
