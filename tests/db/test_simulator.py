"""The Graph API simulator over real HTTP: the send endpoint, fault injection, throughput limits, admin endpoints.

Every test talks to a real server on 127.0.0.1 through `requests`, as the delivery worker will. Webhooks are in
test_simulator_webhooks.py.
"""

from __future__ import annotations

import json
import socket
import time
from http.client import HTTPConnection
from pathlib import Path

import pytest
import requests

from wa_outbox.simulator import SimulatorServer

TOKEN = "test-access-token"
PHONE_NUMBER_ID = "100000000000001"
EXAMPLES = json.loads((Path(__file__).parents[1] / "data" / "openapi" / "message-examples.json").read_text())
READ_RECEIPT = "Send typing indicator and read receipt"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

# Every code the worker's error table (wa_outbox/worker/_classify.py) names, and the title Meta gives it.
ERROR_TITLES = {
    0: "AuthException", 1: "API Unknown", 2: "API Service", 3: "API Method", 4: "API Too Many Calls",
    10: "Permission Denied", 100: "Invalid parameter", 190: "Access token has expired",
    368: "Temporarily blocked for policies violations", 80007: "Rate limit issues", 130429: "Rate limit hit",
    131000: "Something went wrong", 131016: "Service unavailable", 131026: "Message Undeliverable",
    131031: "Account has been locked", 131042: "Business eligibility payment issue", 131047: "Re-engagement message",
    131048: "Spam rate limit hit", 131049: "This message was not delivered to maintain healthy ecosystem engagement.",
    131050: "Unable to deliver the message. This recipient has chosen to stop receiving marketing messages on "
            "WhatsApp from your business.",
    131051: "Unsupported message type", 131056: "(Business Account, Consumer Account) pair rate limit hit",
    131057: "Account in maintenance mode", 132000: "Template Param Count Mismatch", 132001: "Template does not exist",
    132005: "Template Hydrated Text Too Long", 132007: "Template Format Character Policy Violated",
    132012: "Template Parameter Format Mismatch", 132015: "Template is Paused", 132016: "Template is Disabled",
    133004: "Server Temporarily Unavailable", 133010: "Phone number Not Registered",
}


def text(to: str = "+5511999990000", body: str = "Seu pedido foi enviado", **extra) -> dict:
    return {"messaging_product": "whatsapp", "recipient_type": "individual", "to": to, "type": "text",
            "text": {"body": body}, **extra}


@pytest.fixture(scope="module")
def shared_sim():
    with SimulatorServer(access_token=TOKEN, app_secret="secret", seed=7) as server:
        yield server


@pytest.fixture
def sim(shared_sim):
    """One server for the module, back to its initial state for each test."""
    shared_sim.reset()
    return shared_sim


@pytest.fixture
def http():
    with requests.Session() as session:
        yield session


def send(http, sim, body, *, phone_number_id=PHONE_NUMBER_ID, headers=AUTH, **kwargs) -> requests.Response:
    return http.post(f"{sim.base_url}/{phone_number_id}/messages", json=body, headers=headers, **kwargs)


def assert_graph_error(response: requests.Response, status: int, code: int) -> dict:
    assert response.status_code == status
    assert response.headers["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == "OAuthException"
    assert isinstance(error["fbtrace_id"], str) and error["fbtrace_id"]
    return error


# --- the send endpoint ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_spec_example_is_accepted(sim, http, name):
    body = dict(EXAMPLES[name])
    if "to" in body:
        body["to"] = "+16505551234"
    response = send(http, sim, body)
    assert response.status_code == 200, response.text
    if name == READ_RECEIPT:
        assert response.json() == {"success": True}
        assert sim.messages() == []
        return
    answer = response.json()
    assert answer["messaging_product"] == "whatsapp"
    assert answer["contacts"] == [{"input": "+16505551234", "wa_id": "16505551234"}]
    [sent] = answer["messages"]
    assert sent["id"].startswith("wamid.")
    if body.get("type") == "template":
        assert sent["message_status"] == "accepted"
    [recorded] = sim.messages()
    assert recorded["wamid"] == sent["id"]
    assert recorded["body"] == body


def test_success_answer_and_record(sim, http):
    response = send(http, sim, text(to="5511999990000", biz_opaque_callback_data="outbox-1"))
    assert response.status_code == 200
    assert response.json()["contacts"] == [{"input": "5511999990000", "wa_id": "5511999990000"}]
    assert set(response.json()) == {"messaging_product", "contacts", "messages"}
    [message] = sim.messages(to="+5511999990000")
    assert message["wamid"] == response.json()["messages"][0]["id"]
    assert message["phone_number_id"] == PHONE_NUMBER_ID
    assert message["to"] == "5511999990000"
    assert message["biz_opaque_callback_data"] == "outbox-1"
    assert message["request_index"] == 1
    assert message["fault"] is None
    assert abs(message["received_at"] - time.time()) < 5


def test_wamids_are_unique(sim, http):
    ids = {send(http, sim, text()).json()["messages"][0]["id"] for _ in range(200)}
    assert len(ids) == 200


@pytest.mark.parametrize("body, field", [
    ({k: v for k, v in text().items() if k != "to"}, "to"),
    (text(type="telegram"), "type"),
    ({**text(), "text": {"preview_url": True}}, "text['body']"),
    ({**text(), "text": {"body": ["not", "a", "string"]}}, "text['body']"),
    (text(to=5511999990000), "to"),
])
def test_invalid_bodies_get_metas_error_and_are_not_recorded(sim, http, body, field):
    error = assert_graph_error(send(http, sim, body), 400, 100)
    assert error["message"] == "(#100) Invalid parameter"
    assert error["error_data"]["messaging_product"] == "whatsapp"
    assert field in error["error_data"]["details"]
    assert set(error) == {"message", "type", "code", "error_data", "fbtrace_id"}
    assert sim.messages() == []
    assert sim.stats()["outcomes"] == {"invalid_request": 1}


def test_a_body_that_is_not_json_is_refused(sim, http):
    response = http.post(f"{sim.base_url}/{PHONE_NUMBER_ID}/messages", data=b"{nope", headers=AUTH)
    assert "not valid JSON" in assert_graph_error(response, 400, 100)["error_data"]["details"]


def test_validation_can_be_switched_off(http):
    with SimulatorServer(access_token=TOKEN, validate=False) as sim:
        assert send(http, sim, {**text(), "colour": "red"}).status_code == 200
        sim.configure(validate=True)
        assert send(http, sim, {**text(), "colour": "red"}).status_code == 400


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}])
def test_a_wrong_or_missing_token_gets_401_code_190(sim, http, headers):
    response = send(http, sim, text(), headers=headers)
    error = assert_graph_error(response, 401, 190)
    assert "access token" in error["message"]
    assert "invalid_token" in response.headers["WWW-Authenticate"]
    assert sim.messages() == []


def test_an_unknown_path_gets_graphs_unsupported_request_error(sim, http):
    response = http.post(f"{sim.url}/v23.0/{PHONE_NUMBER_ID}/mesages", json=text(), headers=AUTH)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["error_subcode"], error["type"]) == (100, 33, "GraphMethodException")


def test_malformed_http_gets_400(sim):
    with socket.create_connection(("127.0.0.1", sim.port), timeout=5) as raw:
        raw.sendall(b"NONSENSE\r\n\r\n")
        assert raw.recv(4096).startswith(b"HTTP/1.1 400 ")
    assert requests.get(f"{sim.admin_url}/stats").status_code == 200  # still serving


def test_connections_are_kept_alive(sim):
    connection = HTTPConnection("127.0.0.1", sim.port, timeout=5)
    payload = json.dumps(text())
    headers = {**AUTH, "Content-Type": "application/json"}
    sockets = set()
    for _ in range(5):
        connection.request("POST", f"/v23.0/{PHONE_NUMBER_ID}/messages", body=payload, headers=headers)
        response = connection.getresponse()
        assert response.status == 200
        response.read()
        sockets.add(id(connection.sock))
    connection.close()
    assert len(sockets) == 1
    assert len(sim.messages()) == 5


# --- faults ---------------------------------------------------------------------------------------------------------

def test_latency(sim, http):
    sim.set_faults([{"mode": "latency", "ms": 200, "jitter_ms": 50}])
    started = time.monotonic()
    assert send(http, sim, text()).status_code == 200
    assert time.monotonic() - started >= 0.19


@pytest.mark.parametrize("kind", ["html", "empty"])
def test_http_error(sim, http, kind):
    sim.set_faults([{"mode": "http_error", "status": 503, "body": kind}])
    response = send(http, sim, text())
    assert response.status_code == 503
    if kind == "html":
        assert b"<html>" in response.content
    else:
        assert response.content == b""
    assert "json" not in response.headers["Content-Type"]
    assert sim.messages() == []


@pytest.mark.parametrize("code", sorted(ERROR_TITLES))
def test_error_codes_have_metas_shape_and_wording(sim, http, code):
    sim.set_faults([{"mode": "error", "code": code}])
    status = 401 if code in (0, 190) else 400
    error = assert_graph_error(send(http, sim, text()), status, code)
    assert error["message"] == f"(#{code}) {ERROR_TITLES[code]}"
    assert error["error_data"]["messaging_product"] == "whatsapp"
    assert error["error_data"]["details"]
    assert "error_subcode" not in error
    assert sim.messages() == []
    assert sim.stats()["outcomes"] == {f"error_{code}": 1}


def test_error_subcode_status_details_and_retry_after(sim, http):
    sim.set_faults([{"mode": "error", "code": 130429, "subcode": 2494055, "http_status": 429, "retry_after": 30,
                     "details": "slow down"}])
    response = send(http, sim, text())
    error = assert_graph_error(response, 429, 130429)
    assert error["error_subcode"] == 2494055
    assert error["error_data"]["details"] == "slow down"
    assert response.headers["Retry-After"] == "30"


def test_timeout_hangs_past_the_clients_read_timeout_and_does_not_accept(sim, http):
    sim.set_faults([{"mode": "timeout", "ms": 3000, "count": 1}])
    with pytest.raises(requests.ReadTimeout):
        send(http, sim, text(), timeout=(2, 0.3))
    assert sim.messages() == []
    assert send(http, sim, text(), timeout=5).status_code == 200  # the rule is spent
    assert len(sim.messages()) == 1
    assert sim.stats()["outcomes"] == {"timeout": 1, "accepted": 1}


def test_lost_response_accepts_the_message_but_resets_the_connection(sim, http):
    sim.set_faults([{"mode": "lost_response", "count": 1}])
    with pytest.raises(requests.ConnectionError):
        send(http, sim, text(biz_opaque_callback_data="outbox-7"))
    [message] = sim.messages()
    assert (message["fault"], message["biz_opaque_callback_data"]) == ("lost_response", "outbox-7")
    assert send(http, sim, text()).status_code == 200  # the pooled session recovers on a new connection
    assert sim.stats()["accepted"] == 2


def test_a_count_limited_rule_fails_only_the_first_matching_request(sim, http):
    sim.set_faults([{"mode": "error", "code": 131000, "match": {"to": r"^\+5511"}, "count": 1}])
    assert send(http, sim, text(to="+4915112345678")).status_code == 200  # does not match: not counted
    assert_graph_error(send(http, sim, text(to="5511999990000")), 400, 131000)  # matches in +digits form
    assert send(http, sim, text(to="+5511999990000")).status_code == 200
    assert [m["request_index"] for m in sim.messages(to="+5511999990000")] == [3]
    assert sim.faults()[0]["remaining"] == 0


def test_rules_match_on_phone_number_id(sim, http):
    sim.set_faults([{"mode": "error", "code": 133010, "match": {"phone_number_id": "999"}}])
    assert send(http, sim, text(), phone_number_id="999").status_code == 400
    assert send(http, sim, text()).status_code == 200


def test_rate_applies_a_rule_to_a_share_of_requests(sim, http):
    sim.set_faults([{"mode": "error", "code": 131016, "rate": 0.5}])
    statuses = [send(http, sim, text()).status_code for _ in range(100)]
    assert 20 <= statuses.count(400) <= 80
    sim.set_faults([{"mode": "error", "code": 131016, "rate": 0}])
    assert all(send(http, sim, text()).status_code == 200 for _ in range(10))


def test_latency_adds_to_the_deciding_rule(sim, http):
    sim.set_faults([{"mode": "latency", "ms": 150}, {"mode": "error", "code": 2}, {"mode": "error", "code": 1}])
    started = time.monotonic()
    assert_graph_error(send(http, sim, text()), 400, 2)  # the first non-latency rule decides
    assert time.monotonic() - started >= 0.14
    assert [rule["remaining"] for rule in sim.faults()] == [None, None, None]


def test_faults_given_at_construction(http):
    with SimulatorServer(access_token=TOKEN, faults=[{"mode": "error", "code": 131057, "count": 2}]) as sim:
        assert [send(http, sim, text()).status_code for _ in range(3)] == [400, 400, 200]


@pytest.mark.parametrize("rule", [
    {"mode": "explode"}, {"mode": "error"}, {"mode": "error", "code": "131000"}, {"mode": "latency", "ms": -1},
    {"mode": "error", "code": 1, "rate": 2}, {"mode": "error", "code": 1, "count": -1},
    {"mode": "error", "code": 1, "match": {"to": "("}}, {"mode": "http_error", "status": 404},
    {"mode": "timeout", "code": 1},
])
def test_bad_rules_are_refused(sim, rule):
    with pytest.raises(ValueError):
        sim.set_faults([rule])


# --- throughput limits ----------------------------------------------------------------------------------------------

def test_mps_limit_answers_130429_per_phone_number(http):
    with SimulatorServer(access_token=TOKEN, mps=5) as sim:
        statuses = [send(http, sim, text(to=f"+55119999900{i:02}")).status_code for i in range(8)]
        assert statuses == [200] * 5 + [400] * 3
        assert_graph_error(send(http, sim, text()), 400, 130429)
        assert send(http, sim, text(), phone_number_id="200000000000002").status_code == 200  # another number
        time.sleep(1.05)  # the behaviour under test: the sliding second passes and the number may send again
        assert send(http, sim, text()).status_code == 200
        assert sim.stats()["outcomes"]["error_130429"] == 4


def test_pair_limit_answers_131056_per_recipient(http):
    with SimulatorServer(access_token=TOKEN, pair_limit={"messages": 2, "window_s": 60}) as sim:
        assert [send(http, sim, text()).status_code for _ in range(2)] == [200, 200]
        error = assert_graph_error(send(http, sim, text(to="5511999990000")), 400, 131056)
        assert "pair rate limit" in error["message"]
        assert send(http, sim, text(to="+4915112345678")).status_code == 200
        assert len(sim.messages(to="+5511999990000")) == 2


# --- admin endpoints ------------------------------------------------------------------------------------------------

def test_admin_faults_over_http(sim, http):
    rules = [{"mode": "error", "code": 131026, "match": {"to": "^\\+4915"}, "count": 1}]
    assert http.put(f"{sim.admin_url}/faults", json={"faults": rules}).status_code == 200
    assert http.get(f"{sim.admin_url}/faults").json() == {"faults": [{**rules[0], "remaining": 1}]}
    assert_graph_error(send(http, sim, text(to="+4915112345678")), 400, 131026)

    refused = http.put(f"{sim.admin_url}/faults", json=[{"mode": "explode"}])
    assert refused.status_code == 400 and "explode" in refused.json()["error"]
    assert http.get(f"{sim.admin_url}/faults").json()["faults"][0]["remaining"] == 0  # unchanged

    assert http.put(f"{sim.admin_url}/faults", json=[]).json() == {"faults": []}


def test_admin_config_over_http(sim, http):
    changed = http.put(f"{sim.admin_url}/config", json={"mps": 1, "status_delays_ms": [1, 2, 3]})
    assert changed.status_code == 200
    assert changed.json()["config"]["mps"] == 1
    assert http.get(f"{sim.admin_url}/config").json()["config"]["status_delays_ms"] == [1, 2, 3]
    assert [send(http, sim, text()).status_code for _ in range(2)] == [200, 400]

    for bad in ({"nope": 1}, {"duplicate_rate": 3}, {"duplicate_max": 0}, {"final_status": "seen"},
                {"pair_limit": {"messages": 0}}):
        response = http.put(f"{sim.admin_url}/config", json=bad)
        assert response.status_code == 400, bad
    assert sim.config.mps == 1


def test_admin_messages_stats_and_reset_over_http(sim, http):
    send(http, sim, text(to="+5511999990000"))
    send(http, sim, text(to="+4915112345678"))
    send(http, sim, text(), headers={})
    send(http, sim, dict(EXAMPLES[READ_RECEIPT]))
    listed = http.get(f"{sim.admin_url}/messages", params={"to": "5511999990000"}).json()
    assert listed["count"] == 1 and listed["messages"][0]["to"] == "+5511999990000"
    assert http.get(f"{sim.admin_url}/messages").json()["count"] == 2
    assert http.get(f"{sim.admin_url}/messages", params={"phone_number_id": "1"}).json()["count"] == 0

    stats = http.get(f"{sim.admin_url}/stats").json()
    assert stats["requests"] == 4
    assert stats["accepted"] == 2
    assert stats["outcomes"] == {"accepted": 2, "unauthorized": 1, "marked_read": 1}
    assert stats["webhooks"]["pending"] == 0

    sim.set_faults([{"mode": "error", "code": 1}])
    assert http.post(f"{sim.admin_url}/reset").json() == {"ok": True}
    assert http.get(f"{sim.admin_url}/messages").json() == {"count": 0, "messages": []}
    assert http.get(f"{sim.admin_url}/stats").json()["requests"] == 0
    assert sim.faults() == []  # back to the rules given at construction


def test_admin_unknown_endpoint_and_method(sim, http):
    assert http.get(f"{sim.admin_url}/nothing").status_code == 404
    assert http.post(f"{sim.admin_url}/messages").status_code == 405
    assert http.put(f"{sim.admin_url}/config", data=b"{not json").status_code == 400


def test_base_url_is_what_the_worker_is_configured_with(sim):
    assert sim.base_url == f"http://127.0.0.1:{sim.port}/v23.0"
    assert sim.admin_url == f"http://127.0.0.1:{sim.port}/_admin"
