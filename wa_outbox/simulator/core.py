"""The simulated Cloud API without its sockets: what to answer to a send, what to record, which webhooks to post.

`Simulator.handle_send` turns one `POST /{version}/{phone_number_id}/messages` into a `Reply`; the HTTP layer
(server.py) only waits `delay_s` and then writes the answer or resets the connection (`drop`). The order of checks
follows Meta's: token, body, then the faults a rule injects (an error or a broken transport refuses the message),
then the throughput limits, then acceptance. Acceptance records the message, which is what tests count: the
messages a recipient actually received, with the index of the HTTP attempt that delivered each.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import itertools
import json
import random
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..meta_validation import InvalidRequest, RequestChecker
from . import errors
from .config import SimulatorConfig
from .faults import FaultRule, FaultSet
from .limits import OVER_MESSAGING_LIMIT_CODE, MessagingLimit, ThroughputLimits
from .media import MediaLibrary
from .templates import TemplateBook, cursor, offset
from .uploads import UploadRefused, UploadRegistry
from .webhooks import WebhookDispatcher, envelope, inbound_message, number_update, plan_statuses

JSON = "application/json; charset=UTF-8"
_NON_DIGITS = re.compile(r"[^0-9]")
_HTML_ERROR = (b"<!DOCTYPE html><html><head><title>Error</title></head><body><h1>Sorry, something went wrong.</h1>"
               b"<p>We're working on getting this fixed as soon as we can.</p></body></html>")


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = JSON
    delay_s: float = 0.0  # wait this long before answering (or dropping)
    drop: bool = False  # reset the connection instead of answering


# Message keys: a serial from a random start, so ids never repeat within a process and rarely across runs.
_KEYS = itertools.count(secrets.randbits(64) << 8)


def new_wamid(wa_id: str) -> str:
    """A unique id shaped like Meta's (base64 of a length-prefixed recipient and an 18-hex-digit message key)."""
    recipient = wa_id.encode()[:255]
    key = f"{next(_KEYS) & (1 << 72) - 1:018X}".encode()
    raw = b"\x1c\x18" + bytes([len(recipient)]) + recipient + b"\x15\x02\x00\x11\x18\x12" + key + b"\x00"
    return "wamid." + base64.b64encode(raw).decode()


class Simulator:
    """State and behaviour of the fake Cloud API; thread-safe (one short lock around the shared state)."""

    def __init__(self, *, access_token: str, app_secret: str, config: SimulatorConfig,
                 faults: Sequence[dict[str, Any]] = (), seed: int | None = None):
        self._authorization = f"Bearer {access_token}".encode()
        self._initial = (config, list(faults))
        self._config = config
        self._rng = random.Random(seed)
        self._checker = RequestChecker()
        self._faults = FaultSet(list(faults), self._rng)
        self._limits = ThroughputLimits()
        self._messaging_limit = MessagingLimit()
        self._lock = threading.Lock()
        self._messages: list[dict[str, Any]] = []
        self._requests = 0
        self._outcomes: Counter[str] = Counter()
        self.uploads = UploadRegistry()  # POST /{phone-number-id}/media (uploads.py)
        self.webhooks = WebhookDispatcher(app_secret, lambda: self._config, self._rng)
        self.media = MediaLibrary()  # inbound messages' files (simulator/media.py)
        self.templates = TemplateBook()  # templates a test paused, approved or disabled (simulator/templates.py)

    # --- the send endpoint ------------------------------------------------------------------------------------------

    def handle_send(self, phone_number_id: str, authorization: str | None, raw_body: bytes,
                    arrived: tuple[float, float] | None = None) -> Reply:
        """Answer a send as Meta would. `arrived` (wall clock, monotonic) is when the request came in, which the
        throughput limits count by; None: now."""
        with self._lock:
            self._requests += 1
            request_index = self._requests
        config = self._config
        number = config.number(phone_number_id)
        if number is None:  # a number of no account of its own: the simulator's one token, as before
            authorized = authorization is not None and hmac.compare_digest(authorization.encode(), self._authorization)
        else:  # a number with its own token accepts only that one
            authorized = _bearer_is(authorization, number.token)
            if not authorized and self._known_token(authorization, config):
                return self._refuse("no_access", 400, _no_access(phone_number_id))  # valid, not for this number
        if not authorized:
            reason = ("Invalid OAuth access token - Cannot parse access token" if authorization
                      else "An active access token must be used to query information about the current user.")
            body = errors.graph_error(190, message=reason)
            del body["error"]["error_data"]  # Meta's token errors carry none
            return self._refuse("unauthorized", 401, body,
                                (("WWW-Authenticate", f'OAuth "Facebook Platform" "invalid_token" "{reason}"'),))
        try:
            body = json.loads(raw_body)
            parsed = self._checker.parse(body, validate=config.validate)
        except ValueError as exc:  # a JSONDecodeError or InvalidRequest
            details = str(exc) if isinstance(exc, InvalidRequest) else "The request body is not valid JSON."
            return self._refuse("invalid_request", 400, errors.graph_error(
                100, message="(#100) Invalid parameter", details=details))
        unusable = self.uploads.refusal(phone_number_id, body) if parsed.kind == "message" else None
        if unusable is not None:  # an id the simulator issued, but not to this number (uploads.py)
            return self._refuse("invalid_media_id", 400, errors.graph_error(
                100, message="(#100) Invalid parameter", details=unusable))

        template = _template_key(config, phone_number_id, body) if parsed.type == "template" else None
        if template is not None:  # a paused or disabled template is refused before anything else of the send
            code = self.templates.refusal(*template)
            if code is not None:
                self._count(f"error_{code}")
                return _graph_reply(code)

        decision = self._faults.pick(phone_number_id, parsed.to, parsed.wa_id)
        rule = decision.rule
        refused = self._injected_refusal(rule)
        if refused is not None:
            return _delayed(refused, decision.delay_s)
        dropped = rule is not None and rule.mode == "lost_response"

        if parsed.kind == "mark_read":
            self._count("lost_response" if dropped else "marked_read")
            return Reply(200, b'{"success":true}', delay_s=decision.delay_s, drop=dropped)

        failed_code = rule.params["code"] if rule is not None and rule.mode == "failed_status" else None
        if failed_code is None:  # media Meta cannot fetch: accepted now, `failed` once the download fails
            failed_code = parsed.failure_code
        received_at, arrived_monotonic = arrived if arrived is not None else (time.time(), time.monotonic())
        assert parsed.wa_id is not None  # a message: only a mark_read has none, and it was answered above
        with self._lock:
            limited = self._limits.admit(arrived_monotonic, phone_number_id, parsed.wa_id, config.mps,
                                         config.pair_limit)
            portfolio, messaging_limit = config.portfolio_of(phone_number_id)
            within = limited is not None or self._messaging_limit.admit(
                received_at, phone_number_id, parsed.wa_id, parsed.type == "template", messaging_limit,
                config.messaging_limit_window_s, portfolio)
            if not within:  # over the portfolio's messaging limit: accepted, then failed (limits.py)
                failed_code = OVER_MESSAGING_LIMIT_CODE
                self._outcomes["over_messaging_limit"] += 1
            if limited is None:
                message = {
                    "wamid": new_wamid(parsed.wa_id), "phone_number_id": phone_number_id, "to": parsed.to,
                    "wa_id": parsed.wa_id, "type": parsed.type, "body": body,
                    "biz_opaque_callback_data": parsed.biz_opaque_callback_data, "received_at": received_at,
                    "request_index": request_index, "fault": rule.mode if rule is not None else None,
                    "over_messaging_limit": not within,
                }
                self._messages.append(message)
                self._outcomes["lost_response" if dropped else "accepted"] += 1
            else:
                self._outcomes[f"error_{limited}"] += 1
        if limited is not None:
            return _delayed(_graph_reply(limited), decision.delay_s)

        if config.webhook_url:
            self.webhooks.schedule_statuses(phone_number_id, plan_statuses(message, config, self._rng, failed_code))
        if template is not None:  # a change set to happen after so many sends (POST /_admin/templates after_sends)
            self.post_template_webhooks(template[0], self.templates.accepted(*template),
                                        self.templates.webhook_delay(*template))
        sent: dict[str, Any] = {"id": message["wamid"]}
        if parsed.type == "template":
            sent["message_status"] = "accepted"
        answer = {"messaging_product": "whatsapp", "contacts": [{"input": parsed.to, "wa_id": parsed.wa_id}],
                  "messages": [sent]}
        return Reply(200, _dumps(answer), delay_s=decision.delay_s, drop=dropped)

    # --- for the media endpoints (simulator/media.py) ----------------------------------------------------------------

    def authorized_for(self, phone_number_id: str, authorization: str | None) -> bool:
        """Whether `authorization` is the number's token (or, for a number of no account of its own, the
        simulator's)."""
        number = self._config.number(phone_number_id)
        if number is None:
            return authorization is not None and hmac.compare_digest(authorization.encode(), self._authorization)
        return _bearer_is(authorization, number.token)

    def media_fault(self, phone_number_id: str, route: str) -> tuple[FaultRule | None, Reply | None, float]:
        """The fault rule a media request draws, the refusal it answers with (None: none), and its latency."""
        decision = self._faults.pick(phone_number_id, None, None, route=route)
        return decision.rule, self._injected_refusal(decision.rule), decision.delay_s

    def _known_token(self, authorization: str | None, config: SimulatorConfig) -> bool:
        """Whether `authorization` carries a token valid for some number (the simulator's own, or a number's)."""
        if not authorization:
            return False
        given = authorization.encode()
        return any([hmac.compare_digest(given, self._authorization)] + [
            _bearer_is(authorization, n.token) for n in config.numbers.values()])

    def _injected_refusal(self, rule: FaultRule | None) -> Reply | None:
        """The answer a refusing fault rule gives (the message is not accepted), or None."""
        if rule is None:
            return None
        params = rule.params
        if rule.mode == "timeout":
            self._count("timeout")
            return Reply(0, delay_s=params["ms"] / 1000, drop=True)
        if rule.mode == "http_error":
            self._count("http_error")
            body = _HTML_ERROR if params["body"] == "html" else b""
            return Reply(params["status"], body, content_type="text/html; charset=utf-8")
        if rule.mode == "error":
            self._count(f"error_{params['code']}")
            return _graph_reply(params["code"], subcode=params["subcode"], details=params["details"],
                                http_status=params["http_status"], retry_after=params["retry_after"])
        return None

    def _refuse(self, outcome: str, status: int, body: dict[str, Any], headers: tuple = ()) -> Reply:
        self._count(outcome)
        return Reply(status, _dumps(body), headers)

    def _count(self, outcome: str) -> None:
        with self._lock:
            self._outcomes[outcome] += 1

    # --- inspection and control (the admin endpoints and the Python API) --------------------------------------------

    @property
    def config(self) -> SimulatorConfig:
        return self._config

    def configure(self, changes: dict[str, Any]) -> SimulatorConfig:
        """Apply JSON-style changes to the configuration; ValueError leaves it unchanged."""
        with self._lock:
            self._config = self._config.updated(changes)
            return self._config

    def messages(self, to: str | None = None, phone_number_id: str | None = None) -> list[dict[str, Any]]:
        """Accepted messages in acceptance order; `to` matches the recipient's digits (`+5511…` = `5511…`)."""
        wanted = None if to is None else (_NON_DIGITS.sub("", to) or to)
        with self._lock:
            return [dict(m) for m in self._messages
                    if (wanted is None or wanted in (m["wa_id"], m["to"]))
                    and (phone_number_id is None or m["phone_number_id"] == phone_number_id)]

    def faults(self) -> list[dict[str, Any]]:
        return self._faults.to_list()

    def set_faults(self, rules: list[dict[str, Any]]) -> None:
        self._faults.replace(rules)

    def inbound(self, from_: str, text: str | None = None, *, phone_number_id: str | None = None,
                name: str | None = None, message: dict[str, Any] | None = None) -> str:
        """Post a webhook as if user `from_` wrote to the business; returns the inbound message's wamid."""
        config = self._config
        if not config.webhook_url:
            raise ValueError("no webhook_url configured")
        wa_id = _NON_DIGITS.sub("", from_ or "")
        if not wa_id:
            raise ValueError("from must be a phone number")
        valid_text = isinstance(text, str) and message is None
        valid_message = text is None and isinstance(message, dict) and isinstance(message.get("type"), str)
        if not (valid_text or valid_message):
            raise ValueError('give either "text" (a string) or "message" (an object with a "type")')
        wamid = new_wamid(wa_id)
        value = {"contacts": [{"profile": {"name": name or f"User {wa_id[-4:]}"}, "wa_id": wa_id}],
                 "messages": [inbound_message(wa_id, wamid, time.time(), text=text, message=message)]}
        number_id = phone_number_id or config.phone_number_id
        with self._lock:  # their service window opens (the messaging limit does not count replies in it)
            self._messaging_limit.wrote(time.time(), number_id, wa_id)
        self.webhooks.schedule_payload(envelope(config, number_id, value), number_id)
        return wamid

    def number_update(self, field: str, value: dict[str, Any], *, phone_number_id: str | None = None) -> dict:
        """Post a `phone_number_quality_update` or `account_update` webhook about a number (issue 20: quality,
        messaging tier, throughput, restrictions), signed as its other webhooks are; returns the payload posted."""
        config = self._config
        if not config.webhook_url:
            raise ValueError("no webhook_url configured")
        if not isinstance(value, dict):
            raise ValueError("value must be a JSON object (the change's value: event, current_limit, ...)")
        number_id = phone_number_id or config.phone_number_id
        payload = number_update(config, number_id, field, value, time.time())
        self.webhooks.schedule_payload(payload, number_id)
        return payload

    def change_template(self, data: Any) -> dict[str, Any]:
        """POST /_admin/templates: create, pause, approve, disable … a template, and post Meta's webhooks of it."""
        listed, posts = self.templates.change(data, self._config.waba_id)
        waba = data.get("waba") or self._config.waba_id
        self.post_template_webhooks(waba, posts, self.templates.webhook_delay(waba, data["name"], data["language"]))
        return {**listed, "webhooks": len(posts)}

    def list_templates(self, waba: str, authorization: str | None, params: dict[str, str], base: str) -> Reply:
        """GET /{version}/{waba-id}/message_templates: the WABA's templates, `limit` a page (default 25), cursor
        paging (`after`, and `paging.next` while there is more), as the Graph API pages a list. The token: the
        simulator's, or one of a number of that WABA."""
        config = self._config
        tokens = [n.token for n in config.numbers.values() if (n.waba or config.waba_id) == waba]
        if not (authorization is not None and hmac.compare_digest(authorization.encode(), self._authorization)
                or any(_bearer_is(authorization, t) for t in tokens)):
            body = errors.graph_error(190, message="Invalid OAuth access token - Cannot parse access token")
            del body["error"]["error_data"]
            return self._refuse("unauthorized", 401, body)
        try:
            limit = int(params.get("limit") or 25)
            if not 1 <= limit <= 1000:
                raise ValueError(limit)
            page, after = self.templates.page(waba, limit, params.get("after"))
        except ValueError:
            return self._refuse("invalid_request", 400, errors.graph_error(
                100, message="(#100) Invalid parameter", details="limit must be 1 to 1000, after a cursor it gave"))
        answer: dict[str, Any] = {"data": page}
        if page:
            first = cursor(offset(params.get("after")))
            answer["paging"] = {"cursors": {"before": first, "after": after or first}}
            if after is not None:
                answer["paging"]["next"] = f"{base}?limit={limit}&after={after}"
        self._count("templates_listed")
        return Reply(200, _dumps(answer))

    def post_template_webhooks(self, waba: str, posts: list[dict[str, Any]], delay_s: float = 0.0) -> None:
        """Template webhooks go to the app's own callback URL (never a number's override), signed with the secret of
        the app of the WABA's numbers."""
        if not posts or not self._config.webhook_url:
            return
        number_id = next((n for n, number in self._config.numbers.items() if number.waba == waba), "")
        for payload in posts:
            self.webhooks.schedule_payload(payload, number_id, delay_s)

    def reset(self) -> None:
        """Back to the state at construction: no messages, no counts, the initial configuration and faults."""
        config, faults = self._initial
        self.templates.clear()
        self._faults.replace(faults)
        self._config = config
        self.webhooks.clear()
        with self._lock:
            self._messages.clear()
            self._requests = 0
            self._outcomes.clear()
            self._limits.clear()
            self._messaging_limit.clear()
        self.uploads.clear()
        self.media.clear()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            stats = {"requests": self._requests, "accepted": len(self._messages), "outcomes": dict(self._outcomes)}
            # limit: the default portfolio's; counted and over: all portfolios'; then each configured portfolio's
            stats["messaging_limit"] = {
                "limit": self._config.messaging_limit, "counted": self._messaging_limit.counted(),
                "over": self._messaging_limit.over,
                "portfolios": {pid: {"limit": p.messaging_limit, "counted": self._messaging_limit.counted(pid),
                                     "over": self._messaging_limit.over_of(pid)}
                               for pid, p in self._config.portfolios.items()}}
        stats["webhooks"] = self.webhooks.stats()
        stats["uploads"] = self.uploads.stats()
        stats["media"] = self.media.stats()
        return stats

    # --- media uploads (mediaout): POST /{phone-number-id}/media ---------------------------------------------------

    def handle_upload(self, phone_number_id: str, authorization: str | None, content_type: str | None,
                      raw_body: bytes) -> Reply:
        """Answer an upload as Meta would: the number's token, then the faults a rule for
        uploads injects (`"match": {"route": "upload"}`), then the multipart body, then `{"id": ...}`."""
        with self._lock:
            self._requests += 1
        refused = self._unauthorized(phone_number_id, authorization)
        if refused is not None:
            return refused
        decision = self._faults.pick(phone_number_id, None, None, route="upload")
        injected = self._injected_refusal(decision.rule)
        if injected is not None:  # a fault refuses it: nothing is issued
            return _delayed(injected, decision.delay_s)
        try:
            upload = self.uploads.accept(phone_number_id, content_type, raw_body)
        except UploadRefused as exc:
            return self._refuse("upload_refused", 400, errors.graph_error(exc.code, details=exc.details))
        dropped = decision.rule is not None and decision.rule.mode == "lost_response"
        self._count("upload_lost_response" if dropped else "uploaded")
        return Reply(200, _dumps({"id": upload.id}), delay_s=decision.delay_s, drop=dropped)

    def _unauthorized(self, phone_number_id: str, authorization: str | None) -> Reply | None:
        """handle_send's token check, for the other endpoints of a number: None when `authorization` may act."""
        config = self._config
        number = config.number(phone_number_id)
        if number is None:
            authorized = authorization is not None and hmac.compare_digest(authorization.encode(), self._authorization)
        else:
            authorized = _bearer_is(authorization, number.token)
            if not authorized and self._known_token(authorization, config):
                return self._refuse("no_access", 400, _no_access(phone_number_id))
        if authorized:
            return None
        reason = ("Invalid OAuth access token - Cannot parse access token" if authorization
                  else "An active access token must be used to query information about the current user.")
        body = errors.graph_error(190, message=reason)
        del body["error"]["error_data"]
        return self._refuse("unauthorized", 401, body,
                            (("WWW-Authenticate", f'OAuth "Facebook Platform" "invalid_token" "{reason}"'),))


def _template_key(config: SimulatorConfig, phone_number_id: str, body: Any) -> tuple[str, str, str] | None:
    """A template send's (WABA of the number, template name, language code)."""
    template = body.get("template") if isinstance(body, dict) else None
    if not isinstance(template, dict):
        return None
    language = template.get("language")
    code = language.get("code") if isinstance(language, dict) else language
    number = config.number(phone_number_id)
    waba = (number.waba if number else None) or config.waba_id
    name = template.get("name")
    return (waba, name, code) if isinstance(name, str) and isinstance(code, str) else None


def _bearer_is(authorization: str | None, token: str | None) -> bool:
    return token is not None and authorization is not None and hmac.compare_digest(
        authorization.encode(), f"Bearer {token}".encode())


def _no_access(phone_number_id: str) -> dict[str, Any]:
    """Meta's answer to a valid token without access to the number (another number's or business's token): the
    number is an object this token cannot load. As sent, e.g. https://github.com/sajuthankappan/whatsapp-cloud-api-rs/
    issues/3; the subcode: https://developers.facebook.com/docs/graph-api/guides/error-handling"""
    return {"error": {"message": f"Unsupported post request. Object with ID '{phone_number_id}' does not exist, "
                                 "cannot be loaded due to missing permissions, or does not support this operation. "
                                 "Please read the Graph API documentation at https://developers.facebook.com/docs/"
                                 "graph-api", "type": "GraphMethodException", "code": 100, "error_subcode": 33,
                      "fbtrace_id": errors.fbtrace_id()}}


def _graph_reply(code: int, *, subcode: int | None = None, details: str | None = None,
                 http_status: int | None = None, retry_after: float | None = None) -> Reply:
    headers = (("Retry-After", f"{retry_after:g}"),) if retry_after is not None else ()
    body = errors.graph_error(code, subcode=subcode, details=details)
    return Reply(http_status or errors.default_http_status(code), _dumps(body), headers)


def _dumps(payload: dict[str, Any]) -> bytes:
    """Compact, as the Graph API answers."""
    return json.dumps(payload, separators=(",", ":")).encode()


def _delayed(reply: Reply, delay_s: float) -> Reply:
    return dataclasses.replace(reply, delay_s=reply.delay_s + delay_s) if delay_s else reply
