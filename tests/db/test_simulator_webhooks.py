"""Status and inbound webhooks from the simulator, received by a real local HTTP server that checks each signature
with wa-outbox's own verifier, over the exact bytes received."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tests.live import wait_for
from wa_outbox.simulator import SimulatorServer
from wa_outbox.webhooks import SignatureError, verify_signature

TOKEN = "test-access-token"
APP_SECRET = "test-app-secret-é"  # non-ASCII on purpose: the HMAC key is its UTF-8 bytes
PHONE_NUMBER_ID = "100000000000001"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FAST = (10, 20, 30)  # status delays, ms


class Receiver:
    """Records every webhook POST (raw bytes, parsed payload, arrival time). Answers 200, or 500 to the first
    `failures` POSTs; while `gate` is cleared, holds every POST unanswered (`held` of them now). A bad signature
    fails the test."""

    def __init__(self, *, failures: int = 0, port: int = 0):
        self.posts: list[dict] = []
        self.bad_signatures: list[str] = []
        self.failures = failures
        self.held = 0
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    verify_signature(APP_SECRET, body, self.headers.get("X-Hub-Signature-256"))
                except SignatureError as exc:
                    receiver.bad_signatures.append(str(exc))
                with receiver._lock:
                    receiver.held += 1
                receiver.gate.wait(10)
                with receiver._lock:
                    receiver.held -= 1
                with receiver._lock:
                    failing = receiver.failures > 0
                    receiver.failures -= failing
                    if not failing:
                        receiver.posts.append({"body": body, "payload": json.loads(body), "at": time.monotonic()})
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/webhooks/whatsapp"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()

    def statuses(self) -> list[dict]:
        """Every status update received, in arrival order."""
        return [status for post in self.posts for entry in post["payload"]["entry"]
                for change in entry["changes"] for status in change["value"].get("statuses", [])]


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.close()
    assert receiver.bad_signatures == []


def simulator(receiver: Receiver, **config) -> SimulatorServer:
    return SimulatorServer(access_token=TOKEN, app_secret=APP_SECRET, webhook_url=receiver.url,
                           status_delays_ms=config.pop("status_delays_ms", FAST), seed=3, **config)


def send(sim, body, **kwargs) -> requests.Response:
    return requests.post(f"{sim.base_url}/{PHONE_NUMBER_ID}/messages", json=body, headers=AUTH, **kwargs)


def text(to="+5511999990000", body="Olá, seu pedido saiu", **extra) -> dict:
    return {"messaging_product": "whatsapp", "to": to, "type": "text", "text": {"body": body}, **extra}


def test_sent_delivered_read_in_order_signed_and_shaped_like_metas(receiver):
    with simulator(receiver) as sim:
        wamid = send(sim, text(biz_opaque_callback_data="outbox-42")).json()["messages"][0]["id"]
        assert sim.wait_for_webhooks_idle(5)
    assert [s["status"] for s in receiver.statuses()] == ["sent", "delivered", "read"]
    for post in receiver.posts:
        # Meta's bytes: compact, non-ASCII escaped; the signature was checked over exactly these
        assert post["body"] == json.dumps(post["payload"], separators=(",", ":"), ensure_ascii=True).encode()
        assert post["payload"]["object"] == "whatsapp_business_account"
        [entry] = post["payload"]["entry"]
        [change] = entry["changes"]
        assert change["field"] == "messages"
        assert change["value"]["messaging_product"] == "whatsapp"
        assert change["value"]["metadata"]["phone_number_id"] == PHONE_NUMBER_ID
    sent, delivered, read = receiver.statuses()
    for status in (sent, delivered, read):
        assert status["id"] == wamid
        assert status["recipient_id"] == "5511999990000"
        assert status["biz_opaque_callback_data"] == "outbox-42"
        assert isinstance(status["timestamp"], str) and status["timestamp"].isdigit()
    assert sent["conversation"]["expiration_timestamp"].isdigit()
    assert sent["pricing"] == {"billable": True, "pricing_model": "CBP", "category": "service"}
    assert "pricing" in delivered and "expiration_timestamp" not in delivered["conversation"]
    assert "pricing" not in read and "conversation" not in read
    assert receiver.posts[0]["at"] < receiver.posts[1]["at"] < receiver.posts[2]["at"]


def test_callback_data_is_echoed_only_when_sent_and_final_status_is_configurable(receiver):
    with simulator(receiver, final_status="delivered") as sim:
        send(sim, text())
        assert sim.wait_for_webhooks_idle(5)
    assert [s["status"] for s in receiver.statuses()] == ["sent", "delivered"]
    assert all("biz_opaque_callback_data" not in s for s in receiver.statuses())


def test_webhooks_never_delay_the_answer(receiver):
    receiver.gate.clear()  # the receiver hangs: every sender thread is stuck in a POST
    with simulator(receiver, status_delays_ms=(0, 0, 0)) as sim:
        for _ in range(3):
            assert send(sim, text(), timeout=5).status_code == 200
        assert receiver.posts == []
        receiver.gate.set()
        assert sim.wait_for_webhooks_idle(10)
    assert len(receiver.statuses()) == 9


def test_failed_status_fault(receiver):
    with simulator(receiver, faults=[{"mode": "failed_status", "code": 131026, "count": 1}]) as sim:
        failing = send(sim, text(biz_opaque_callback_data="outbox-1"))
        assert failing.status_code == 200  # accepted, then failed
        send(sim, text(to="+4915112345678"))
        assert sim.wait_for_webhooks_idle(5)
    wamid = failing.json()["messages"][0]["id"]
    failed = [s for s in receiver.statuses() if s["id"] == wamid]
    assert [s["status"] for s in failed] == ["failed"]
    [error] = failed[0]["errors"]
    assert error["code"] == 131026
    assert error["title"] == "Message Undeliverable"
    assert error["error_data"]["details"]
    assert failed[0]["biz_opaque_callback_data"] == "outbox-1"
    assert [s["status"] for s in receiver.statuses() if s["id"] != wamid] == ["sent", "delivered", "read"]


def test_lost_response_still_sends_the_status_webhooks(receiver):
    with simulator(receiver, faults=[{"mode": "lost_response"}]) as sim:
        with pytest.raises(requests.ConnectionError):
            send(sim, text(biz_opaque_callback_data="outbox-9"))
        assert sim.wait_for_webhooks_idle(5)
        [message] = sim.messages()
    statuses = receiver.statuses()
    assert [s["status"] for s in statuses] == ["sent", "delivered", "read"]
    assert {s["id"] for s in statuses} == {message["wamid"]}
    assert {s["biz_opaque_callback_data"] for s in statuses} == {"outbox-9"}  # how a sender settles the unknown


def test_duplicates_are_byte_identical(receiver):
    with simulator(receiver, duplicate_rate=1.0) as sim:
        send(sim, text())
        assert sim.wait_for_webhooks_idle(5)
        assert sim.stats()["webhooks"]["duplicates"] == 3
    bodies = [post["body"] for post in receiver.posts]
    assert len(bodies) == 6
    assert all(bodies.count(body) == 2 for body in bodies)


def test_duplicate_max_redelivers_each_post_one_to_that_many_more_times(receiver):
    with simulator(receiver, duplicate_rate=1.0, duplicate_max=3) as sim:
        for _ in range(10):
            send(sim, text())
        assert sim.wait_for_webhooks_idle(10)
        duplicates = sim.stats()["webhooks"]["duplicates"]
    bodies = [post["body"] for post in receiver.posts]
    originals = set(bodies)
    assert len(originals) == 30  # 10 messages x (sent, delivered, read), one POST each
    copies = [bodies.count(body) for body in originals]
    assert all(2 <= c <= 4 for c in copies), copies  # the original plus 1 to 3 redeliveries
    assert len(set(copies)) > 1  # not always the same number
    assert duplicates == len(bodies) - 30


def test_reorder_posts_statuses_out_of_order(receiver):
    with simulator(receiver, reorder_rate=1.0) as sim:
        for _ in range(3):
            send(sim, text())
        assert sim.wait_for_webhooks_idle(5)
    by_message: dict[str, list[str]] = {}
    for status in receiver.statuses():
        by_message.setdefault(status["id"], []).append(status["status"])
    assert len(by_message) == 3
    for order in by_message.values():
        assert sorted(order) == ["delivered", "read", "sent"]
        assert order != ["sent", "delivered", "read"]


def test_batch_puts_a_messages_statuses_in_one_post(receiver):
    with simulator(receiver, batch_rate=1.0) as sim:
        send(sim, text())
        assert sim.wait_for_webhooks_idle(5)
    [post] = receiver.posts
    [entry] = post["payload"]["entry"]
    assert [s["status"] for s in entry["changes"][0]["value"]["statuses"]] == ["sent", "delivered", "read"]


def test_statuses_piling_up_behind_a_slow_receiver_are_batched(receiver):
    receiver.gate.clear()  # the four sender threads get stuck while the other statuses become due
    with simulator(receiver, final_status="sent", webhook_max_batch=100) as sim:
        for i in range(10):
            send(sim, text(to=f"+55119999900{i:02}"))
        # Every status is due by now: each is in a POST held at the closed gate or waiting behind them for a sender
        # thread (how they are shared out depends on the threads' timing; the batching does not).
        def piled_up() -> bool:
            held = receiver.held
            webhooks = sim.stats()["webhooks"]
            return held >= 1 and webhooks["pending"] == held + webhooks["due"]
        wait_for(piled_up, timeout=60, what="every status held at the gate or due behind it")
        receiver.gate.set()
        assert sim.wait_for_webhooks_idle(10)
    assert len(receiver.statuses()) == 10
    assert len({s["id"] for s in receiver.statuses()}) == 10
    assert len(receiver.posts) < 10


def test_a_failing_receiver_is_retried_with_backoff(receiver):
    receiver.failures = 2
    with simulator(receiver, final_status="sent", webhook_retry_ms=50) as sim:
        send(sim, text())
        assert sim.wait_for_webhooks_idle(5)
        webhooks = sim.stats()["webhooks"]
    assert [s["status"] for s in receiver.statuses()] == ["sent"]
    assert (webhooks["failed_attempts"], webhooks["delivered"], webhooks["dropped"]) == (2, 1, 0)


def test_a_receiver_that_is_down_at_first_gets_the_webhook_once_up():
    with socket.socket() as probe:  # a port with nobody listening (yet)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/webhooks/whatsapp"
    with SimulatorServer(access_token=TOKEN, app_secret=APP_SECRET, webhook_url=url, status_delays_ms=FAST,
                         final_status="sent", webhook_retry_ms=100, webhook_max_attempts=6) as sim:
        send(sim, text())
        wait_for(lambda: sim.stats()["webhooks"]["failed_attempts"] >= 1, what="a first attempt at the closed port")
        receiver = Receiver(port=port)
        try:
            assert sim.wait_for_webhooks_idle(5)
            assert [s["status"] for s in receiver.statuses()] == ["sent"]
            assert sim.stats()["webhooks"]["failed_attempts"] >= 1
        finally:
            receiver.close()


def test_attempts_are_bounded(receiver):
    receiver.failures = 1000
    with simulator(receiver, final_status="sent", webhook_retry_ms=10, webhook_max_attempts=3) as sim:
        send(sim, text())
        assert sim.wait_for_webhooks_idle(5)
        webhooks = sim.stats()["webhooks"]
    assert (webhooks["posts"], webhooks["dropped"], webhooks["delivered"]) == (3, 1, 0)
    assert receiver.failures == 997


def test_no_webhook_url_means_no_webhooks():
    with SimulatorServer(access_token=TOKEN, app_secret=APP_SECRET) as sim:
        assert send(sim, text()).status_code == 200
        assert sim.wait_for_webhooks_idle(1)
        assert sim.stats()["webhooks"]["posts"] == 0
        assert requests.post(f"{sim.admin_url}/inbound", json={"from": "+1555", "text": "hi"}).status_code == 400


def test_inbound_text_message_over_admin_http(receiver):
    with simulator(receiver) as sim:
        answer = requests.post(f"{sim.admin_url}/inbound",
                               json={"from": "+55 11 99999-0000", "text": "Oi, cadê meu pedido? ü", "name": "Ana",
                                     "phone_number_id": "200000000000002"})
        assert answer.status_code == 200
        assert sim.wait_for_webhooks_idle(5)
    [post] = receiver.posts
    assert b"\\u00fc" in post["body"]  # escaped, as Meta sends it
    value = post["payload"]["entry"][0]["changes"][0]["value"]
    assert value["metadata"]["phone_number_id"] == "200000000000002"
    assert value["contacts"] == [{"profile": {"name": "Ana"}, "wa_id": "5511999990000"}]
    [message] = value["messages"]
    assert message["id"] == answer.json()["id"]
    assert message["from"] == "5511999990000"
    assert message["type"] == "text"
    assert message["text"] == {"body": "Oi, cadê meu pedido? ü"}
    assert message["timestamp"].isdigit()


def test_inbound_any_message_object_from_python(receiver):
    reply = {"type": "interactive", "interactive": {"type": "button_reply",
                                                    "button_reply": {"id": "confirm", "title": "Confirmar"}}}
    with simulator(receiver) as sim:
        wamid = sim.inbound("+5511999990000", message=reply)
        assert sim.wait_for_webhooks_idle(5)
        with pytest.raises(ValueError):
            sim.inbound("+5511999990000")  # neither text nor message
    value = receiver.posts[0]["payload"]["entry"][0]["changes"][0]["value"]
    assert value["metadata"]["phone_number_id"] == PHONE_NUMBER_ID  # the configured default
    [message] = value["messages"]
    assert message == {"from": "5511999990000", "id": wamid, "timestamp": message["timestamp"], **reply}


def test_reset_forgets_scheduled_webhooks(receiver):
    with simulator(receiver, status_delays_ms=(500, 500, 500)) as sim:
        send(sim, text())
        assert sim.stats()["webhooks"]["pending"] == 3
        sim.reset()
        assert sim.wait_for_webhooks_idle(0.1)
        # A send after the reset has its statuses due later than the forgotten ones were: once they have all
        # arrived, the forgotten ones would have too.
        later = send(sim, text()).json()["messages"][0]["id"]
        assert sim.wait_for_webhooks_idle(10)
    assert {s["id"] for s in receiver.statuses()} == {later}


def test_retry_delays_double_up_to_the_cap_when_one_is_set():
    from wa_outbox.simulator.config import SimulatorConfig, webhook_retry_delay
    uncapped = SimulatorConfig().updated({"webhook_retry_ms": 200})
    assert [webhook_retry_delay(uncapped, a) for a in range(6)] == [0.2, 0.4, 0.8, 1.6, 3.2, 6.4]
    capped = uncapped.updated({"webhook_retry_max_ms": 1000})
    assert [webhook_retry_delay(capped, a) for a in range(6)] == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert uncapped.updated({"webhook_retry_max_ms": None}).webhook_retry_max_ms is None
    for bad in (0, -5, "1", True):
        with pytest.raises(ValueError, match="webhook_retry_max_ms"):
            uncapped.updated({"webhook_retry_max_ms": bad})
