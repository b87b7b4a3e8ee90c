"""The simulator serving many numbers and apps: each number accepts only its own token (another number's token gets
Meta's answer for a token without access to the number), its webhooks name its WABA and are signed by its app's
secret; numbers and apps come from the constructor or the admin config, where a token is rotated or revoked."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from wa_outbox.simulator import SimulatorServer
from wa_outbox.webhooks import SignatureError, verify_signature

DEFAULT_TOKEN = "the-simulators-own-token"
DEFAULT_SECRET = "the-simulators-own-secret"
APPS = {"111": {"secret": "secret-of-app-111"}, "222": {"secret": "secret-of-app-222"}}
NUMBERS = {"5001": {"token": "token-5001", "app": "111", "waba": "901"},
           "5002": {"token": "token-5002", "app": "222", "waba": "902", "display_phone_number": "15550002"}}
TEXT = {"messaging_product": "whatsapp", "to": "+5511999990000", "type": "text", "text": {"body": "Olá"}}


class Receiver:
    """Records each webhook POST with the secret (of those given) that verifies its signature."""

    def __init__(self, secrets: dict[str, str]):
        self.posts: list[tuple[str | None, dict]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                signed_by = None
                for name, secret in secrets.items():
                    try:
                        verify_signature(secret, body, self.headers.get("X-Hub-Signature-256"))
                        signed_by = name
                    except SignatureError:
                        pass
                receiver.posts.append((signed_by, json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/webhooks/whatsapp"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def receiver():
    receiver = Receiver({"111": APPS["111"]["secret"], "222": APPS["222"]["secret"], "default": DEFAULT_SECRET})
    yield receiver
    receiver.close()


@pytest.fixture
def sim(receiver):
    with SimulatorServer(access_token=DEFAULT_TOKEN, app_secret=DEFAULT_SECRET, webhook_url=receiver.url,
                         status_delays_ms=(5, 10, 15), seed=1, apps=APPS, numbers=NUMBERS) as server:
        yield server


def send(sim, number: str, token: str | None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.post(f"{sim.base_url}/{number}/messages", json=TEXT, headers=headers, timeout=5)


def test_each_number_accepts_only_its_own_token(sim):
    assert send(sim, "5001", "token-5001").status_code == 200
    assert send(sim, "5002", "token-5002").status_code == 200
    # another number's token (or the simulator's own): valid, but not for this number
    for token in ("token-5002", DEFAULT_TOKEN):
        refused = send(sim, "5001", token)
        error = refused.json()["error"]
        assert refused.status_code == 400 and (error["code"], error["error_subcode"]) == (100, 33)
        assert "Object with ID '5001' does not exist, cannot be loaded due to missing permissions" in error["message"]
    unknown = send(sim, "5001", "no-such-token")
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == 190
    # a number of no account of its own keeps today's behaviour: the simulator's one token
    assert send(sim, "100000000000001", DEFAULT_TOKEN).status_code == 200
    assert send(sim, "100000000000001", "token-5001").status_code == 401
    assert [m["phone_number_id"] for m in sim.messages()] == ["5001", "5002", "100000000000001"]


def test_webhooks_are_signed_by_the_app_that_owns_the_number_and_name_its_waba(sim, receiver):
    for number, token in (("5001", "token-5001"), ("5002", "token-5002"), ("100000000000001", DEFAULT_TOKEN)):
        assert send(sim, number, token).status_code == 200
    assert sim.wait_for_webhooks_idle(10)
    seen = {}
    for signed_by, payload in receiver.posts:
        [entry] = payload["entry"]
        metadata = entry["changes"][0]["value"]["metadata"]
        seen.setdefault(metadata["phone_number_id"], set()).add((signed_by, entry["id"],
                                                                 metadata["display_phone_number"]))
    assert seen == {"5001": {("111", "901", "15550000001")}, "5002": {("222", "902", "15550002")},
                    "100000000000001": {("default", "100000000000000", "15550000001")}}
    sim.inbound("+5511999990000", "oi", phone_number_id="5002")
    assert sim.wait_for_webhooks_idle(10)
    assert receiver.posts[-1][0] == "222" and "messages" in receiver.posts[-1][1]["entry"][0]["changes"][0]["value"]


def test_numbers_and_apps_change_through_the_admin_config(sim):
    admin = f"{sim.admin_url}/config"
    # rotate 5001's token: the old one is then unknown (190), the new one sends
    changed = requests.post(admin, json={"numbers": {"5001": {"token": "token-5001-v2", "app": "111"}}}, timeout=5)
    assert changed.status_code == 200
    shown = changed.json()["config"]
    assert shown["numbers"]["5001"]["token"] == "***" and shown["apps"]["111"] == {"secret": "***"}
    assert "token-5001-v2" not in changed.text and "secret-of-app-111" not in changed.text
    assert set(shown["numbers"]) == {"5001", "5002"}  # merged by id: 5002 kept
    assert send(sim, "5001", "token-5001").status_code == 401
    assert send(sim, "5001", "token-5001-v2").status_code == 200
    # revoke it: no token works for it any more
    assert requests.put(admin, json={"numbers": {"5001": {"token": None}}}, timeout=5).status_code == 200
    assert send(sim, "5001", "token-5001-v2").status_code == 401
    # remove 5002: it falls back to the simulator's own token
    assert requests.put(admin, json={"numbers": {"5002": None}}, timeout=5).status_code == 200
    assert send(sim, "5002", DEFAULT_TOKEN).status_code == 200
    for bad in ({"numbers": {"5003": {"token": "t", "app": "999"}}}, {"numbers": {"x": {"token": "t"}}},
                {"numbers": {"5003": {"app": "111"}}}, {"apps": {"333": {"secret": ""}}}, {"numbers": []}):
        refused = requests.put(admin, json=bad, timeout=5)
        assert refused.status_code == 400, bad
    assert set(sim.config.numbers) == {"5001"}


def test_the_cli_takes_numbers_and_apps_from_a_file(tmp_path):
    from click.testing import CliRunner

    from wa_outbox.simulator.cli import simulator_command
    bad = tmp_path / "bad.json"
    bad.write_text('{"numbers": {"5001": {"token": "t", "app": "999"}}}')
    result = CliRunner().invoke(simulator_command, ["--port", "0", "--accounts", str(bad)])
    assert result.exit_code != 0 and "app 999 is not among apps" in result.output
    assert "Traceback" not in result.output
