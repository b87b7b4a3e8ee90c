"""`wa-outbox dev`, the README's "run it" command, as a user runs it: one process tree, the curl it prints, the
simulator's faults, and Ctrl-C leaving nothing behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import requests

from tests.live import wait_for
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "dev-api-token-0123456789"


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_dev_runs_the_whole_system_and_ctrl_c_stops_it(database_url, db):
    web_port, sim_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    env.update(DATABASE_URL=database_url, WA_OUTBOX_RETRY_BASE_SECONDS="0.2", WA_OUTBOX_RETRY_MAX_SECONDS="1")
    proc = subprocess.Popen([sys.executable, "-m", "wa_outbox.cli", "dev", "--port", str(web_port),
                             "--simulator-port", str(sim_port), "--status-delay-ms", "50"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    web, sim = f"http://127.0.0.1:{web_port}", f"http://127.0.0.1:{sim_port}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        def up():
            try:
                return requests.get(f"{web}/readyz", timeout=5).ok and requests.get(
                    f"{sim}/_admin/stats", timeout=5).ok
            except requests.RequestException:
                return False
        wait_for(up, timeout=30, interval=0.2, what="web and simulator up")

        r = requests.post(f"{web}/v1/messages", headers=auth, json={
            "to": "+5511987654321", "message": {"type": "text", "text": {"body": "Hello from wa-outbox"}}})
        assert r.status_code == 202
        nid = r.json()["id"]
        timeline = wait_for(lambda: (lambda m: m["status"] == "read" and m)(
            requests.get(f"{web}/v1/messages/{nid}", headers=auth).json()), what="read")
        assert [e["event"] for e in timeline["timeline"]] == ["queued", "sending", "sent", "delivered", "read"]

        # Meta misbehaves: a transient error, then a lost response, then a permanent error
        requests.put(f"{sim}/_admin/faults", json=[
            {"mode": "error", "code": 131000, "count": 1, "match": {"to": "5511900000001"}},
            {"mode": "lost_response", "count": 1, "match": {"to": "5511900000002"}},
            {"mode": "error", "code": 131026, "match": {"to": "5511900000003"}}]).raise_for_status()
        ids = [requests.post(f"{web}/v1/messages", headers=auth, json={
            "to": f"+551190000000{i}", "message": {"type": "text", "text": {"body": "x"}}}).json()["id"]
            for i in (1, 2, 3)]
        final = {}
        for nid in ids:
            final[nid] = wait_for(lambda nid=nid: (lambda m: m["status"] in ("read", "dead") and m)(
                requests.get(f"{web}/v1/messages/{nid}", headers=auth).json()), what=f"{nid} settled")
        retried, lost, dead = (final[i] for i in ids)
        assert retried["status"] == "read" and "retry_scheduled" in [e["event"] for e in retried["timeline"]]
        assert lost["status"] == "read" and "reconciled" in [e["event"] for e in lost["timeline"]]
        assert dead["status"] == "dead" and dead["last_error"]["code"] == 131026
        received = requests.get(f"{sim}/_admin/messages").json()
        recipients = sorted(m["wa_id"] for m in (received["messages"] if isinstance(received, dict) else received))
        assert recipients == ["5511900000001", "5511900000002", "5511987654321"]  # once each; the dead one never
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground process group
        # Everything stops within a few seconds (the children get a short grace, then SIGKILL), never gunicorn's 25 s
        output = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0, output
    assert "curl" in output and f"127.0.0.1:{sim_port}/v23.0" in output
    # one readable line per event, prefixed by the process it came from; no JSON, no start-up chatter
    lines = output.splitlines()
    assert not [line for line in lines if line.split("| ", 1)[-1].startswith("{")], output
    assert "Running upgrade" not in output and "initdb" not in output
    first = timeline["id"]

    def said(prefix: str, text: str) -> bool:
        return any(line.startswith(prefix) and text in line for line in lines)
    assert said("web    | ", f"message {first} queued for +5511987654321")
    assert said("web    | ", "POST /v1/messages 202")
    assert said("worker | ", f"message {first} sending (attempt 1)")
    assert said("worker | ", f"message {first} sent (wamid.")
    assert said("worker | ", f"message {first} delivered") and said("worker | ", f"message {first} read")
    assert said("worker | ", f"message {retried['id']} retry in") and said("worker | ", "131000")
    assert said("worker | ", f"message {dead['id']} dead (attempt 1): 131026")
    assert said("sim    | ", "listening on")
    assert port_is_free(web_port) and port_is_free(sim_port)
    leftovers = subprocess.run(["pgrep", "-f", f"--port {sim_port}"], capture_output=True, text=True).stdout
    assert leftovers.strip() == ""
