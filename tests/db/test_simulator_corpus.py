"""The simulator accepts what Meta accepts and refuses what Meta refuses, on a corpus of real-world send bodies.

tests/data/send-corpus/<source>/ holds bodies with their source and licence: pywa's (captured from its own HTTP
requests) and bodies written from Meta's reference pages, valid and invalid (each invalid one with the answer Meta
gives: a (#100) refusal with its details, or acceptance and then a `failed` status). Each body goes through the
simulator directly (HTTP) and through `wa-outbox dev`'s path: enqueue → worker → simulator → status webhooks.
"""

from __future__ import annotations

import json

import pytest
import requests

from tests.conftest import DATA
from tests.live import SENDER, running_worker, wait_for, worker_settings
from wa_outbox.enqueue import enqueue
from wa_outbox.simulator.validation import RequestChecker

CORPUS = DATA / "send-corpus"
SOURCES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


def _valid() -> dict[str, dict]:
    return {f"{source}:{name}": body for source in SOURCES if (CORPUS / source / "valid.json").exists()
            for name, body in json.loads((CORPUS / source / "valid.json").read_text()).items()}


def _invalid() -> dict[str, dict]:
    return {f"{source}:{name}": case for source in SOURCES if (CORPUS / source / "invalid.json").exists()
            for name, case in json.loads((CORPUS / source / "invalid.json").read_text()).items()}


VALID = _valid()
INVALID = _invalid()


def test_every_source_has_its_origin_and_licence():
    assert {"pywa", "meta-reference"} <= set(SOURCES)
    for source in SOURCES:
        assert (CORPUS / source / "SOURCE").read_text().strip(), source
        assert (CORPUS / source / "LICENSE").read_text().strip(), source
    assert (CORPUS / "pywa" / "LICENSE").read_text().startswith("MIT License")
    assert len(VALID) >= 70 and len(INVALID) >= 15
    assert {c["expect"] for c in INVALID.values()} == {"refused", "failed"}


@pytest.fixture(scope="module")
def checker() -> RequestChecker:
    return RequestChecker()


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_body_is_accepted_and_deliverable(checker, name):
    parsed = checker.parse(VALID[name])
    assert parsed.kind == "message" and parsed.failure_code is None


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_body_is_refused_or_bound_to_fail(checker, name):
    case = INVALID[name]
    if case["expect"] == "refused":
        with pytest.raises(ValueError) as refused:
            checker.parse(case["body"])
        assert str(refused.value) == case["details"]
    else:
        assert checker.parse(case["body"]).failure_code == case["code"]


def _post(sim, body: dict) -> requests.Response:
    return requests.post(f"{sim.base_url}/{SENDER}/messages", json=body, timeout=10,
                         headers={"Authorization": "Bearer test-access-token"})


def test_the_simulator_answers_each_body_as_meta_does(sim):
    """Over HTTP: 200 with a wamid for every valid body and every body that fails later; Meta's (#100) error shape,
    details naming the field, for every refused one (and nothing recorded for it)."""
    for name, body in VALID.items():
        answer = _post(sim, body)
        assert answer.status_code == 200, (name, answer.text)
        assert answer.json()["messages"][0]["id"].startswith("wamid."), name
    refused = 0
    for name, case in INVALID.items():
        answer = _post(sim, case["body"])
        if case["expect"] == "failed":
            assert answer.status_code == 200, (name, answer.text)
            continue
        refused += 1
        assert answer.status_code == 400, name
        error = answer.json()["error"]
        assert (error["code"], error["type"], error["message"]) == (100, "OAuthException", "(#100) Invalid parameter")
        assert error["error_data"] == {"messaging_product": "whatsapp", "details": case["details"]}, name
        assert error["fbtrace_id"]
    accepted = len(VALID) + len(INVALID) - refused
    assert len(sim.messages()) == accepted


def _state(db, nid: int) -> tuple[str, dict | None]:
    return db.execute("SELECT status, last_error FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone()


def test_the_corpus_through_enqueue_worker_and_simulator(db, sender, sim, settings):
    """`wa-outbox dev`'s path, one worker for every body: each valid one reaches `read` and arrives unchanged but
    for `to` and `biz_opaque_callback_data`; each invalid one ends `dead` with Meta's (#100) error or `failed` with
    the status's error, and never `delivered` or `read`."""
    bodies = {**VALID, **{name: case["body"] for name, case in INVALID.items()}}
    ids: dict[int, str] = {}
    for index, (name, body) in enumerate(bodies.items()):
        message = {k: v for k, v in body.items() if k != "to"}  # the app names the recipient beside the body
        ids[enqueue(db, to=f"+1650555{index:04d}", message=message)] = name
    final = {"read", "dead", "failed"}
    with running_worker(worker_settings(settings, sim.base_url, rate_limit_mps=1000)):
        wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status <> ALL(%s)",
                                    (list(final),)).fetchone()[0] == 0, timeout=60, what="every message settled")

    received = {}
    for message in sim.messages():
        nid = int(message["biz_opaque_callback_data"].split(":")[0])
        received[nid] = message["body"]
    for nid, name in ids.items():
        status, last_error = _state(db, nid)
        events = [e for (e,) in db.execute("SELECT event FROM wa_outbox.notification_events "
                                           "WHERE notification_id = %s", (nid,))]
        if name in VALID:
            assert status == "read", (name, last_error)
            body = VALID[name]
            sent = received[nid]
            theirs = body.get("biz_opaque_callback_data")
            assert sent["biz_opaque_callback_data"] == (f"{nid}:{theirs}" if theirs else str(nid)), name
            assert {k: v for k, v in sent.items() if k not in ("to", "biz_opaque_callback_data")} == \
                {k: v for k, v in body.items() if k not in ("to", "biz_opaque_callback_data")}, name
            continue
        case = INVALID[name]
        assert "delivered" not in events and "read" not in events, name
        if case["expect"] == "refused":
            assert status == "dead", (name, status)
            assert last_error["code"] == 100, name
            assert case["details"] in json.dumps(last_error, ensure_ascii=False), name
            assert nid not in received, name
        else:
            assert status == "failed", (name, status)
            assert [e["code"] for e in last_error["errors"]] == [case["code"]], name
