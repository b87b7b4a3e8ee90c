"""The README's walk-through of events, as a new user runs it: `wa-outbox dev` in one terminal; in a second one the
`wa-outbox events listen` line dev prints (its env: private addresses allowed, the dev key from the data dir); a
customer's reply through the simulator (`POST /_admin/inbound`) printed by the listener as a verified
`message.received`; a message sent with POST /v1/messages printed as its `message.status` events (sent, delivered,
read), the same events GET /v1/events serves.

The delays (POST /_admin/inbound to the printed line, and the send to each status line) are measured and printed
(`pytest -s` shows them): the docs say "within a second"; on a loaded machine it is reported, never asserted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from tests.live import wait_for
from tests.processes import free_port
from wa_outbox import events

ROOT = Path(__file__).resolve().parents[2]
AUTH = {"Authorization": "Bearer dev-api-token-0123456789"}
CUSTOMER = "5511987654321"


class Lines:
    """A process's output lines, each with the time it was read (the wall clock: compared with Postgres's now())."""

    def __init__(self, stream) -> None:
        self.lines: list[tuple[float, str]] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in iter(stream.readline, ""):
            self.lines.append((time.time(), line.rstrip("\n")))

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def find(self, *parts: str) -> tuple[float, str] | None:
        return next(((at, line) for at, line in self.lines if all(p in line for p in parts)), None)


def stop(proc: subprocess.Popen, group: bool = False) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT) if group else proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
        proc.wait(timeout=10)


def feed(web: str) -> list[dict]:
    """Every event GET /v1/events serves, from the oldest, following next_cursor."""
    seen: list[dict] = []
    cursor = None
    while True:
        page = requests.get(f"{web}/v1/events", params={"after": cursor, "limit": 50} if cursor else {"limit": 50},
                            headers=AUTH, timeout=30)
        assert page.status_code == 200, page.text
        body = page.json()
        seen += body["data"]
        cursor = body["next_cursor"]
        if not body["has_more"]:
            return seen


def test_dev_then_events_listen_hears_a_reply_and_a_send_s_statuses(database_url, db, tmp_path):
    web_port, sim_port, listen_port = free_port(), free_port(), free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    dev = subprocess.Popen([sys.executable, "-m", "wa_outbox.cli", "dev", "--port", str(web_port),
                            "--simulator-port", str(sim_port), "--status-delay-ms", "50"], cwd=ROOT,
                           env={**base, "DATABASE_URL": database_url, "WA_OUTBOX_DATA_DIR": str(tmp_path)},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    dev_out = Lines(dev.stdout)
    web, sim = f"http://127.0.0.1:{web_port}", f"http://127.0.0.1:{sim_port}"
    listener = None
    try:
        def up() -> bool:
            assert dev.poll() is None, dev_out.text()
            try:
                return requests.get(f"{web}/readyz", timeout=5).ok and requests.get(f"{sim}/_admin/stats",
                                                                                     timeout=5).ok
            except requests.RequestException:
                return False
        wait_for(up, timeout=120, interval=0.2, what="dev's web and simulator up")
        # The second terminal: the line dev printed, on a port known to be free (dev suggests web port + 100).
        printed = wait_for(lambda: dev_out.find("wa-outbox events listen --port"), timeout=30, what="the line")[1]
        found = re.search(r"WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE=true WA_OUTBOX_SECRET_KEY=\$\(cat (\S+)\) "
                          r"wa-outbox events listen --port \d+", printed)
        assert found, printed
        key = Path(found.group(1)).read_text().strip()
        listener = subprocess.Popen([sys.executable, "-m", "wa_outbox.cli", "events", "listen", "--port",
                                     str(listen_port)], cwd=ROOT,
                                    env={**base, "DATABASE_URL": database_url, "WA_OUTBOX_SECRET_KEY": key,
                                         "WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE": "true"},
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        heard, said = Lines(listener.stdout), Lines(listener.stderr)

        def listening() -> bool:
            assert listener.poll() is None, said.text()
            return said.find("listening on") is not None
        wait_for(listening, timeout=60, interval=0.1, what="the listener up")
        assert said.find("endpoint ep_", "registered for") and key not in said.text() + heard.text()

        # A customer writes in.
        started = time.time()
        answer = requests.post(f"{sim}/_admin/inbound", json={"from": f"+{CUSTOMER}", "text": "Oi, chegou? ✓",
                                                               "name": "Ana"}, timeout=30)
        assert answer.status_code == 200, answer.text
        wamid = answer.json()["id"]
        at, line = wait_for(lambda: heard.find("message.received", "Oi, chegou? ✓"), timeout=120,
                            what="the reply printed by the listener")
        reply_delay = at - started

        # A message sent: its statuses (the simulator reports sent, delivered and read 50 ms apart).
        sending = time.time()
        sent = requests.post(f"{web}/v1/messages", headers=AUTH, timeout=30, json={
            "to": f"+{CUSTOMER}", "message": {"type": "text", "text": {"body": "Chegou sim!"}}})
        assert sent.status_code == 202, sent.text
        outbox_id = sent.json()["id"]

        def statuses() -> list[dict] | None:
            mine = [e for e in feed(web) if e["type"] == "message.status" and e["data"]["outbox_id"] == outbox_id]
            return mine if [e["data"]["status"] for e in mine] == ["sent", "delivered", "read"] else None
        status_events = wait_for(statuses, timeout=120, interval=0.5, what="sent, delivered, read in /v1/events")
        status_lines = [wait_for(lambda e=e: heard.find("message.status", f" {e['id']} ",
                                                        f"outbox {outbox_id} {e['data']['status']} "), timeout=120,
                                 what=f"{e['data']['status']} printed by the listener") for e in status_events]
    finally:
        if listener is not None:
            stop(listener)
        stop(dev, group=True)

    [received] = [e for e in feed_rows(db) if e["type"] == "message.received"]
    assert received["data"]["message"]["id"] == wamid and received["data"]["message"]["text"]["body"] == "Oi, chegou? ✓"
    assert f" {received['id']} " in line
    assert [e["id"] for e in status_events] == [e["id"] for e in feed_rows(db) if e["type"] == "message.status"]
    printed_events = [line for _, line in heard.lines]
    assert len(printed_events) == 4, printed_events  # the reply and three statuses, each once
    # every delivery verified at its first try (the listener answers 401 to one that does not)
    codes = [r[0] for r in db.execute("SELECT status_code FROM wa_outbox.delivery_attempts")]
    assert codes == [200] * 4, codes
    delays = {"reply": reply_delay, **{e["data"]["status"]: at - sending for e, (at, _) in
                                       zip(status_events, status_lines, strict=True)}}
    # The reply's path: the simulator's webhook stored (the event's transaction), the worker's dispatch, the print.
    occurred, dispatched = db.execute(
        "SELECT extract(epoch FROM e.occurred_at), extract(epoch FROM d.created_at) FROM wa_outbox.events e "
        "JOIN wa_outbox.deliveries d ON d.event_seq = e.seq WHERE e.type = 'message.received'").fetchone()
    delays |= {"reply: inbound to stored": float(occurred) - started,
               "reply: stored to dispatched": float(dispatched) - float(occurred),
               "reply: dispatched to printed": reply_delay + started - float(dispatched)}
    print("\nevents walk-through delays (s):", json.dumps({k: round(v, 3) for k, v in delays.items()}))


def feed_rows(db) -> list[dict]:
    """The events as the feed's envelopes say them (type, id, data), from the table, in seq order."""
    return [{"id": events.event_id(seq), "type": type_, "data": data}
            for seq, type_, data in db.execute("SELECT seq, type, data FROM wa_outbox.events ORDER BY seq")]
