"""The OpenAPI description of /v1 (wa_outbox/web/openapi.json) is valid, complete and true to what is served.

Every /v1 route Flask serves is documented with its methods, every documented path and method is served, and real
responses of the real app on real Postgres match the documented schema of their status code.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import jsonschema
import pytest

from tests.conftest import API_TOKEN
from wa_outbox import __version__
from wa_outbox.states import HoldReason, MessageStatus

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
TEXT = {"type": "text", "text": {"body": "Olá"}}
DOCUMENT_FILE = "wa_outbox/web/openapi.json"
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def document() -> dict[str, Any]:
    return json.loads(resources.files("wa_outbox.web").joinpath("openapi.json").read_text(encoding="utf-8"))


def openapi_path(flask_rule: str) -> str:
    """`/v1/messages/<int:notification_id>` → `/v1/messages/{notification_id}`."""
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", flask_rule)


def served_operations(app) -> dict[tuple[str, str], str]:
    """(OpenAPI path, method) → the Flask rule and endpoint, for every /v1 route (HEAD and OPTIONS are Flask's)."""
    served = {}
    for rule in app.url_map.iter_rules():
        if rule.rule == "/v1" or rule.rule.startswith("/v1/"):
            for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
                served[(openapi_path(rule.rule), method.lower())] = f"{rule.rule} (endpoint {rule.endpoint})"
    return served


def documented_operations() -> set[tuple[str, str]]:
    return {(path, method) for path, item in document()["paths"].items() for method in item if method in HTTP_METHODS}


def test_the_document_is_valid_openapi_3_1():
    described = document()
    try:
        from openapi_spec_validator import validate
    except ImportError:  # the structural minimum, where the validator is not installed
        assert described["openapi"].startswith("3.1.")
        assert described["info"]["title"] and described["info"]["version"]
        for path, item in described["paths"].items():
            assert path.startswith("/"), path
            for method in set(item) & HTTP_METHODS:
                assert item[method]["responses"], f"{method.upper()} {path} documents no response"
    else:
        assert described["openapi"].startswith("3.1.")
        validate(described)  # raises, naming the offending part


def test_every_v1_route_is_documented_with_its_methods(app):
    documented = documented_operations()
    missing = [f"{method.upper()} {path}: served by Flask rule {rule}, but not under paths[{path!r}][{method!r}]"
               for (path, method), rule in sorted(served_operations(app).items()) if (path, method) not in documented]
    assert not missing, f"routes missing from {DOCUMENT_FILE}:\n" + "\n".join(missing)


def test_every_documented_operation_is_served(app):
    served = served_operations(app)
    stale = [f"{method.upper()} {path}" for path, method in sorted(documented_operations())
             if (path, method) not in served]
    assert not stale, f"{DOCUMENT_FILE} documents operations no Flask route serves:\n" + "\n".join(stale)


def test_path_parameters_are_declared():
    described = document()
    for path, item in described["paths"].items():
        declared = {p["name"] for p in _parameters(described, item.get("parameters", [])) if p["in"] == "path"}
        for method in set(item) & HTTP_METHODS:
            names = declared | {p["name"] for p in _parameters(described, item[method].get("parameters", []))
                                if p["in"] == "path"}
            assert names == set(re.findall(r"\{([^}]+)\}", path)), f"{method.upper()} {path} declares {names}"


def test_the_documented_statuses_are_the_stored_words():
    assert document()["components"]["schemas"]["MessageStatus"]["enum"] == [s.value for s in MessageStatus]
    assert document()["components"]["schemas"]["HoldReason"]["enum"] == [s.value for s in HoldReason]


def test_served_without_a_token_with_the_package_version(client):
    r = client.get("/v1/openapi.json")
    assert r.status_code == 200 and r.mimetype == "application/json"
    assert r.json["paths"] == document()["paths"] and r.json["info"]["version"] == __version__
    assert client.get("/v1/dead").status_code == 401  # the rest of /v1 still needs one


def test_real_responses_match_the_documented_schemas(app, client, db, sender):
    check = _Checker(app)
    created = check(client.post("/v1/messages", json={"to": "+55 11 98765-4321", "message": TEXT,
                                                      "correlation_id": "corr-openapi"},
                                headers={**AUTH, "Idempotency-Key": "order-1"}), 202)
    nid = created["id"]
    check(client.post("/v1/messages", json={"to": "+5511987654321", "message": TEXT},
                      headers={**AUTH, "Idempotency-Key": "order-1"}), 202)
    check(client.post("/v1/messages", json={"to": "+5511987654321", "message": {"type": "text"}},
                      headers={**AUTH, "Idempotency-Key": "order-1"}), 400)
    check(client.post("/v1/messages", json={"to": "+5511987654321", "message": TEXT, "surprise": 1}, headers=AUTH),
          400)
    check(client.post("/v1/messages", json={"to": "+5511987654321", "message": {"type": "text", "text": {
        "body": "another"}}}, headers={**AUTH, "Idempotency-Key": "order-1"}), 409)
    check(client.post("/v1/messages", data=b"x" * (129 * 1024), headers={**AUTH, "Content-Type": "application/json"}),
          413)
    check(client.get("/v1/messages", headers={"Authorization": "Bearer wrong-token-0123456789"}), 401)
    assert check(client.get(f"/v1/messages/{nid}", headers=AUTH), 200)["timeline"][0]["event"] == "queued"
    check(client.get("/v1/messages/2", headers=AUTH), 404)
    assert len(check(client.get("/v1/messages?q=%2B5511987654321", headers=AUTH), 200)["messages"]) == 1
    check(client.get("/v1/messages?q=corr-openapi&limit=1", headers=AUTH), 200)
    check(client.get("/v1/messages", headers=AUTH), 400)
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead', attempts = 10, "
               "last_error = '{\"message\": \"131026: undeliverable\", \"code\": 131026}' WHERE id = %s", (nid,))
    assert [d["id"] for d in check(client.get("/v1/dead?code=131026&limit=5", headers=AUTH), 200)["dead"]] == [nid]
    check(client.get("/v1/dead?limit=0", headers=AUTH), 400)
    check(client.post(f"/v1/messages/{nid}/retry", headers=AUTH), 200)
    check(client.post(f"/v1/messages/{nid}/retry", headers=AUTH), 409)
    check(client.post("/v1/messages/2/retry", headers=AUTH), 404)
    check(client.get("/v1/openapi.json"), 200)
    assert check.seen >= {("/v1/messages", "post"), ("/v1/messages", "get"), ("/v1/messages/{notification_id}", "get"),
                          ("/v1/messages/{notification_id}/retry", "post"), ("/v1/dead", "get")}


class _Checker:
    """Validates a test-client response against the document: its status is documented for the operation the
    request reached, and its JSON body matches that status's schema."""

    def __init__(self, app) -> None:
        self.described = document()
        self.adapter = app.url_map.bind("localhost")
        self.seen: set[tuple[str, str]] = set()

    def __call__(self, response, status: int) -> Any:
        assert response.status_code == status, (response.status_code, response.get_data(as_text=True))
        request = response.request
        rule, _ = self.adapter.match(request.path, method=request.method, return_rule=True)
        path, method = openapi_path(rule.rule), request.method.lower()
        operation = self.described["paths"][path][method]
        documented = operation["responses"].get(str(status))
        assert documented is not None, f"{method.upper()} {path} answered {status}, which the document does not list"
        documented = self._resolve(documented)
        schema = documented["content"]["application/json"]["schema"]
        try:
            jsonschema.validate(response.json, {**schema, "components": self.described["components"]},
                                cls=jsonschema.Draft202012Validator)
        except jsonschema.ValidationError as exc:
            pytest.fail(f"{method.upper()} {path} → {status}: the body does not match the document: {exc.message} "
                        f"at {list(exc.absolute_path)}")
        self.seen.add((path, method))
        return response.json

    def _resolve(self, item: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in item:
            _, kind, name = item["$ref"].removeprefix("#/").split("/")
            item = self.described["components"][kind][name]
        return item


def _parameters(described: dict[str, Any], parameters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    resolved = []
    for parameter in parameters:
        if "$ref" in parameter:
            parameter = described["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[1]]
        resolved.append(parameter)
    return resolved


def test_media_upload_responses_match_the_documented_schemas(app, client):
    """POST /v1/media (outbound media): created, refused input, not multipart, too large."""
    import io
    check = _Checker(app)
    created = check(client.post("/v1/media", headers=AUTH, content_type="multipart/form-data",
                                data={"file": (io.BytesIO(b"%PDF-1.4 x"), "a.pdf", "application/pdf")}), 201)
    assert created["filename"] == "a.pdf"
    check(client.post("/v1/media", headers=AUTH, content_type="multipart/form-data", data={"type": "image/png"}), 400)
    check(client.post("/v1/media", headers=AUTH, json={"file": "x"}), 415)
    check(client.post("/v1/media", headers=AUTH, content_type="multipart/form-data",
                      data={"file": (io.BytesIO(b"x" * (500 * 1024 + 1)), "s.webp", "image/webp")}), 413)
    assert ("/v1/media", "post") in check.seen
