"""The receivers in other languages (examples/receivers/): each one, installed as its README says, verifies the
deliveries wa-outbox signs, with its language's Standard Webhooks reference library, and refuses forged ones.

The deliveries are signed here by the code path the workers use (the `standardwebhooks` Python library's
Webhook.sign over events.envelope_bytes, as the deliveries branch does); the lead switches this test to deliveries by
a real worker once both branches are merged. Node needs npm and its registry, Ruby the `standardwebhooks` and
`webrick` gems: where they are missing the test is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from standardwebhooks import Webhook

from tests.live import wait_for
from tests.processes import free_port
from wa_outbox import events
from wa_outbox.endpoints import new_secret

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "receivers"


def signed(secrets: list[str], seq: int, type_: str, data: dict, *, at: datetime.datetime | None = None):
    """A delivery as the workers make it: the envelope's bytes, signed with each secret (a rotation: two)."""
    body = events.envelope_bytes(seq, type_, datetime.datetime.now(datetime.UTC), data)
    when = at or datetime.datetime.now(datetime.UTC)
    signature = " ".join(Webhook(s).sign(events.event_id(seq), when, body.decode()) for s in secrets)
    return body, {"webhook-id": events.event_id(seq), "webhook-timestamp": str(int(when.timestamp())),
                  "webhook-signature": signature, "Content-Type": "application/json"}


@contextlib.contextmanager
def receiver(command: list[str], cwd: Path, secret: str) -> Iterator[tuple[str, list[str]]]:
    port = free_port()
    proc = subprocess.Popen(command, cwd=cwd, env={"PATH": os.environ["PATH"], "PORT": str(port),
                                                   "WEBHOOK_SECRET": secret, "HOME": str(cwd)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    url = f"http://127.0.0.1:{port}/"

    def up() -> bool:
        assert proc.poll() is None, "".join(lines)
        try:
            return requests.post(url, data=b"{}", timeout=5).status_code == 401  # unsigned: refused
        except requests.ConnectionError:
            return False
    try:
        wait_for(up, timeout=60, interval=0.2, what=f"{command[0]} receiver up")
        yield url, lines
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def check_receiver(url: str, lines: list[str], secret: str) -> None:
    old = new_secret()
    deliveries = [
        signed([secret], 1, "message.received", {"schema_version": 1, "from": "5511987654321",
                                                 "message": {"type": "text", "text": {"body": "Olá 👋"}}}),
        signed([old, secret], 2, "message.status", {"schema_version": 1, "status": "read"}),  # a rotation
    ]
    for body, headers in deliveries:
        answer = requests.post(url, data=body, headers=headers, timeout=10)
        assert answer.status_code == 204, answer.text
    body, headers = signed([secret], 3, "message.status", {"schema_version": 1, "status": "sent"})
    assert requests.post(url, data=body + b" ", headers=headers, timeout=10).status_code == 401  # altered body
    body, headers = signed([new_secret()], 4, "message.status", {"schema_version": 1})
    assert requests.post(url, data=body, headers=headers, timeout=10).status_code == 401  # another secret
    body, headers = signed([secret], 5, "message.status", {"schema_version": 1},
                           at=datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1))
    assert requests.post(url, data=body, headers=headers, timeout=10).status_code == 401  # a replayed old one
    wait_for(lambda: len(lines) >= 2, timeout=30, what="two printed events")
    assert lines[0].startswith("message.received evt_1 ") and "Olá 👋" in lines[0]
    assert json.loads(lines[0].split(" ", 2)[2])["message"]["text"]["body"] == "Olá 👋"
    assert lines[1].startswith("message.status evt_2 ")
    assert len(lines) == 2, lines


def test_the_node_receiver_verifies_deliveries(tmp_path):
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are not installed")
    shutil.copytree(EXAMPLES / "node", tmp_path / "node")
    installed = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
                               cwd=tmp_path / "node", capture_output=True, text=True, timeout=600)
    if installed.returncode != 0:
        pytest.skip(f"npm install failed (is the npm registry reachable?): {installed.stderr.strip()[-300:]}")
    secret = new_secret()
    with receiver(["node", "receiver.js"], tmp_path / "node", secret) as (url, lines):
        check_receiver(url, lines, secret)


def test_the_ruby_receiver_verifies_deliveries(tmp_path):
    if not shutil.which("ruby"):
        pytest.skip("ruby is not installed (apt-get install ruby; gem install standardwebhooks webrick)")
    probe = subprocess.run(["ruby", "-e", 'require "standardwebhooks"; require "webrick"'], capture_output=True,
                           text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"the standardwebhooks and webrick gems are not installed (gem install standardwebhooks webrick; "
                    f"rubygems.org may be unreachable): {(probe.stderr.strip().splitlines() or [''])[0][-200:]}")
    secret = new_secret()
    with receiver(["ruby", "receiver.rb"], EXAMPLES / "ruby", secret) as (url, lines):
        check_receiver(url, lines, secret)
