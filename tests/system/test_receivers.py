"""The receivers in other languages (examples/receivers/): each one, installed as its README says, verifies the
deliveries a real worker (`wa-outbox worker`) makes to it, with its language's Standard Webhooks reference library,
and refuses forged ones. The issue's three checks, against Node: every delivery verifies; a receiver answering 500 to
its first three tries of each event gets each event on the fourth, under one webhook-id; a receiver answering 410 is
disabled (gone) and gets nothing more.

The endpoints are registered with `wa-outbox endpoints add` and read back with `endpoints show --json`, as a user
does. The forged-delivery checks sign with the `standardwebhooks` Python library (what the workers sign with) so
they can alter a body, a secret or a timestamp. Node needs npm and its registry, Ruby the `standardwebhooks` and
`webrick` gems: where they are missing the test is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from standardwebhooks import Webhook

from tests.endpoint_rows import SECRET_KEY, add_events
from tests.live import wait_for
from tests.processes import ROOT, cli_worker, free_port, push_env
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
def receiver(command: list[str], cwd: Path, secret: str, port: int | None = None,
             **env: str) -> Iterator[tuple[str, list[str]]]:
    port = port or free_port()
    proc = subprocess.Popen(command, cwd=cwd, env={"PATH": os.environ["PATH"], "PORT": str(port),
                                                   "WEBHOOK_SECRET": secret, "HOME": str(cwd), **env},
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


@pytest.fixture(scope="module")
def node_dir(tmp_path_factory) -> Path:
    """The Node example installed as its README says (npm install), beside the test-only answering variant."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are not installed")
    where = tmp_path_factory.mktemp("receivers") / "node"
    shutil.copytree(EXAMPLES / "node", where)
    shutil.copy(Path(__file__).parent / "receivers" / "answering_receiver.js", where)
    installed = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
                               cwd=where, capture_output=True, text=True, timeout=600)
    if installed.returncode != 0:
        pytest.skip(f"npm install failed (is the npm registry reachable?): {installed.stderr.strip()[-300:]}")
    return where


def test_the_node_receiver_refuses_forged_deliveries(node_dir):
    secret = new_secret()
    with receiver(["node", "receiver.js"], node_dir, secret) as (url, lines):
        check_receiver(url, lines, secret)


def cli(database_url: str, *args: str) -> dict:
    """`wa-outbox endpoints …  --json` as a user runs it; its JSON answer."""
    done = subprocess.run([sys.executable, "-m", "wa_outbox.cli", "endpoints", *args, "--json"], cwd=ROOT,
                          env=push_env(database_url, SECRET_KEY), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def added(database_url: str, url: str) -> tuple[str, str]:
    made = cli(database_url, "add", url)
    return made["id"], made["secret"]


def deliveries(db, endpoint_id: str) -> list[tuple]:
    """(event seq, status, attempts, the status codes of its attempts in order) of each of the endpoint's deliveries."""
    return db.execute("SELECT d.event_seq, d.status, d.attempts, array_agg(a.status_code ORDER BY a.attempt) "
                      "FROM wa_outbox.deliveries d LEFT JOIN wa_outbox.delivery_attempts a ON a.delivery_id = d.id "
                      "WHERE d.endpoint_id = %s GROUP BY 1, 2, 3 ORDER BY 1", (endpoint_id,)).fetchall()


def tries(lines: list[str]) -> list[tuple[int, str, str, str]]:
    """The answering receiver's verified tries: (try number, type, envelope id, webhook-id header)."""
    return [(int(n), t, i, h) for n, t, i, h in (line.split()[1:] for line in lines if line.startswith("try "))]


def test_a_worker_s_deliveries_all_verify_at_the_node_example(database_url, db, node_dir):
    port = free_port()
    endpoint_id, secret = added(database_url, f"http://127.0.0.1:{port}/")
    seqs = add_events(db, 3) + add_events(db, 2, type_="message.status")
    with receiver(["node", "receiver.js"], node_dir, secret, port=port) as (_, lines), \
            cli_worker(push_env(database_url, SECRET_KEY)):
        wait_for(lambda: len(lines) >= 5, timeout=120, what="five printed events")
        wait_for(lambda: [d[1] for d in deliveries(db, endpoint_id)] == ["delivered"] * 5, timeout=60,
                 what="five deliveries recorded")
    printed = sorted(lines, key=lambda line: int(line.split()[1].removeprefix("evt_")))
    assert [line.split()[:2] for line in printed] == [[t, events.event_id(s)] for t, s in
                                                     zip(["message.received"] * 3 + ["message.status"] * 2, seqs,
                                                         strict=True)]
    assert all(json.loads(line.split(" ", 2)[2])["text"] == "olá ✓" for line in printed)
    # every delivery verified at the first try: a refused one would have been answered 401 and tried again
    assert deliveries(db, endpoint_id) == [(s, "delivered", 1, [204]) for s in seqs]
    assert len(lines) == 5


def test_a_receiver_failing_three_tries_gets_each_event_on_the_fourth_under_one_id(database_url, db, node_dir):
    port = free_port()
    endpoint_id, secret = added(database_url, f"http://127.0.0.1:{port}/")
    seqs = add_events(db, 3)
    with receiver(["node", "answering_receiver.js"], node_dir, secret, port=port,
                  FAIL_FIRST="3", ANSWER="500") as (_, lines), cli_worker(push_env(database_url, SECRET_KEY)):
        wait_for(lambda: [d[1] for d in deliveries(db, endpoint_id)] == ["delivered"] * 3, timeout=180,
                 what="three events delivered")
    seen = tries(lines)
    for seq in seqs:
        mine = [t for t in seen if t[2] == events.event_id(seq)]
        assert [n for n, *_ in mine] == [1, 2, 3, 4], seen  # verified on every try; accepted on the fourth
        assert {h for *_, h in mine} == {events.event_id(seq)}  # one webhook-id on every attempt
    assert len(seen) == 12 and not [line for line in lines if line.startswith("refused evt")]
    assert deliveries(db, endpoint_id) == [(s, "delivered", 4, [500, 500, 500, 204]) for s in seqs]
    assert cli(database_url, "show", endpoint_id)["state"] == "enabled"


def test_an_endpoint_answering_410_is_disabled_and_gets_nothing_more(database_url, db, node_dir):
    gone_port, live_port = free_port(), free_port()
    gone_id, gone_secret = added(database_url, f"http://127.0.0.1:{gone_port}/")
    live_id, live_secret = added(database_url, f"http://127.0.0.1:{live_port}/")
    with receiver(["node", "answering_receiver.js"], node_dir, gone_secret, port=gone_port,
                  FAIL_FIRST="1000000", ANSWER="410") as (_, gone_lines), \
            receiver(["node", "receiver.js"], node_dir, live_secret, port=live_port) as (
                _, live_lines), cli_worker(push_env(database_url, SECRET_KEY)):
        [first] = add_events(db, 1)
        wait_for(lambda: cli(database_url, "show", gone_id)["state"] == "disabled", timeout=120, what="disabled")
        shown = cli(database_url, "show", gone_id)
        assert shown["disabled_reason"] == "gone", shown
        later = add_events(db, 3)
        # the live endpoint gets the later events: the worker has dispatched them by then, to it alone
        wait_for(lambda: len(live_lines) >= 4, timeout=120, what="the live endpoint's four events")
    assert [t[2] for t in tries(gone_lines)] == [events.event_id(first)]  # one try, answered 410; nothing after
    assert [(seq, attempts, codes) for seq, _, attempts, codes in deliveries(db, gone_id)] == [(first, 1, [410])]
    assert [d[0] for d in deliveries(db, live_id)] == [first, *later]
    assert cli(database_url, "show", gone_id)["state"] == "disabled"


def test_during_a_rotation_a_receiver_on_either_secret_verifies_the_worker_s_deliveries(database_url, db, node_dir):
    port = free_port()
    endpoint_id, old = added(database_url, f"http://127.0.0.1:{port}/")
    new = cli(database_url, "rotate-secret", endpoint_id)["secret"]
    assert new != old
    with cli_worker(push_env(database_url, SECRET_KEY)):
        for secret in (old, new):  # the receiver not yet told of the new secret, then told
            with receiver(["node", "receiver.js"], node_dir, secret, port=port) as (_, lines):
                [seq] = add_events(db, 1)
                wait_for(lambda: lines, timeout=120, what="the event printed")
                wait_for(lambda seq=seq: [d[:2] for d in deliveries(db, endpoint_id)][-1] == (seq, "delivered"),
                         timeout=60, what="the delivery recorded")
            assert [line.split()[1] for line in lines] == [events.event_id(seq)]
    assert [(attempts, codes) for _, _, attempts, codes in deliveries(db, endpoint_id)] == [(1, [204])] * 2


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
