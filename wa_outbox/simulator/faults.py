"""Fault rules: how the simulator misbehaves, on purpose, for the requests a rule matches.

A rule is JSON (the same shape at construction, in `PUT /_admin/faults` and on the command line):

    {"mode": "error", "code": 131000, "match": {"to": "^\\\\+5511", "phone_number_id": "1000…"},
     "rate": 1.0, "count": 1}

- `match` (optional; default every request): `to` is a regular expression searched in the recipient as sent and in
  its `+digits` form (so `^\\+5511` matches `5511…` too); `phone_number_id` must be equal.
- `rate` (default 1): the chance a matching request is hit. `count` (default unlimited): hit at most this many
  requests, then the rule is spent; with `rate` 1 this makes tests deterministic ("the first send fails").
- `mode` and its parameters:
  - `latency`: `ms` plus a random `jitter_ms` before answering. The message is accepted (and its statuses sent) at
    once; only the answer is late, so a latency above the client's read timeout is a send with an unknown outcome.
    Latency rules add up with each other and with one other rule.
  - `http_error`: HTTP `status` (default 500) with an HTML (`body: "html"`, default) or empty (`"empty"`) body.
  - `error`: Graph error `code`, optional `subcode`, `details`, `http_status` (default 401 for auth codes, else 400)
    and `retry_after` (seconds, sent as a `Retry-After` header).
  - `timeout`: hang for `ms` (default 30000), then close the connection without an answer. Not accepted.
  - `lost_response`: accept and record the message and send its status webhooks, but reset the connection instead
    of answering.
  - `failed_status`: accept (200), then send a `failed` status webhook with error `code` (default 131026).
- Media (simulator/media.py): `match.route` picks the endpoint a rule applies to: `send` (the default: every rule
  above), `media_lookup` (`GET /{media-id}`) or `media_download` (the URL it answers). `latency`, `http_error`,
  `error` and `timeout` work on both media routes; two modes are the lookup's own:
  - `expired_url`: the lookup answers a URL that has already expired (its download is refused: look up again);
  - `wrong_sha256`: the lookup declares a sha256 that is not the file's;
  and the download's own `slow_body`: `ms` between each megabyte of the body (a slow network).
- `match.route: "upload"`: a rule about media uploads (`POST /{phone-number-id}/media`: latency,
  http_error, error, timeout, lost_response); a rule without a route is about sends and never hits an upload.
Rules are tried in order: every matching latency rule applies, and the first other matching rule decides.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import dataclass, field
from typing import Any

# mode -> {parameter: default}; a parameter without a usable default is required.
_REQUIRED = object()
MODES: dict[str, dict[str, Any]] = {
    "latency": {"ms": 0, "jitter_ms": 0},
    "http_error": {"status": 500, "body": "html"},
    "error": {"code": _REQUIRED, "subcode": None, "details": None, "http_status": None, "retry_after": None},
    "timeout": {"ms": 30000},
    "lost_response": {},
    "failed_status": {"code": 131026},
    # media (simulator/media.py)
    "expired_url": {},
    "wrong_sha256": {},
    "slow_body": {"ms": 1000},
}
_COMMON = {"mode", "match", "rate", "count"}
ROUTES = ("send", "upload", "media_lookup", "media_download")  # match.route; media.py answers the media ones


@dataclass
class FaultRule:
    mode: str
    params: dict[str, Any]
    to: re.Pattern | None = None
    phone_number_id: str | None = None
    rate: float = 1.0
    remaining: int | None = None  # None: unlimited
    spec: dict[str, Any] = field(default_factory=dict)  # the rule as given, for listing
    route: str = "send"  # match.route: which endpoint the rule applies to (ROUTES)

    @classmethod
    def from_dict(cls, rule: dict[str, Any]) -> FaultRule:
        """Parse and check one JSON rule; ValueError says what is wrong."""
        if not isinstance(rule, dict):
            raise ValueError("a fault rule must be a JSON object")
        mode = rule.get("mode")
        if mode not in MODES:
            raise ValueError(f"fault mode must be one of {', '.join(MODES)}, got {mode!r}")
        unknown = sorted(set(rule) - _COMMON - set(MODES[mode]))
        if unknown:
            raise ValueError(f"unknown key(s) for a {mode} rule: {', '.join(unknown)}")
        params = {}
        for name, default in MODES[mode].items():
            value = rule.get(name, default)
            if value is _REQUIRED:
                raise ValueError(f"a {mode} rule needs {name!r}")
            params[name] = _check_param(mode, name, value)

        match = rule.get("match") or {}
        if not isinstance(match, dict) or set(match) - {"to", "phone_number_id", "route"}:
            raise ValueError('match must be an object with "to" (regex), "phone_number_id" and/or "route"')
        route = match.get("route", "send")
        if route not in ROUTES:
            raise ValueError(f"match.route must be one of {', '.join(ROUTES)}, got {route!r}")
        if mode in ("expired_url", "wrong_sha256") and route != "media_lookup":
            raise ValueError(f'a {mode} rule applies to the media lookup: give "match": {{"route": "media_lookup"}}')
        if mode == "slow_body" and route != "media_download":
            raise ValueError('a slow_body rule applies to the media download: give "match": '
                             '{"route": "media_download"}')
        if (route in ("media_lookup", "media_download") and mode in ("lost_response", "failed_status")
                or route == "upload" and mode == "failed_status"):
            raise ValueError(f"a {mode} rule does not apply to route {route}")
        try:
            to = re.compile(match["to"]) if match.get("to") else None
        except (re.error, TypeError) as exc:
            raise ValueError(f"match.to is not a valid regular expression: {exc}") from None
        phone_number_id = match.get("phone_number_id")
        if phone_number_id is not None:
            phone_number_id = str(phone_number_id)

        rate = rule.get("rate", 1.0)
        if not _is_number(rate) or not 0 <= rate <= 1:
            raise ValueError("rate must be a number between 0 and 1")
        count = rule.get("count")
        if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
            raise ValueError("count must be a non-negative integer")
        return cls(mode, params, to, phone_number_id, float(rate), count, dict(rule), route)

    def matches(self, phone_number_id: str, to: str | None, wa_id: str | None, route: str = "send") -> bool:
        if self.remaining == 0 or self.route != route:
            return False
        if self.phone_number_id is not None and self.phone_number_id != phone_number_id:
            return False
        if self.to is not None:
            if to is None:
                return False
            if not (self.to.search(to) or (wa_id and self.to.search("+" + wa_id))):
                return False
        return True

    def to_dict(self) -> dict[str, Any]:
        return {**self.spec, "remaining": self.remaining}


@dataclass(frozen=True, slots=True)
class FaultDecision:
    delay_s: float  # total injected latency
    rule: FaultRule | None  # the non-latency rule that decides the outcome, if any


class FaultSet:
    """The active rules. Picking consumes counts, so it happens under a lock."""

    def __init__(self, rules: list[dict[str, Any]], rng: random.Random):
        self._lock = threading.Lock()
        self._rng = rng
        self._rules = parse_rules(rules)

    def replace(self, rules: list[dict[str, Any]]) -> None:
        parsed = parse_rules(rules)  # all or nothing: a bad rule leaves the old set in place
        with self._lock:
            self._rules = parsed

    def to_list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [rule.to_dict() for rule in self._rules]

    def pick(self, phone_number_id: str, to: str | None, wa_id: str | None, route: str = "send") -> FaultDecision:
        if not self._rules:
            return _NO_FAULT
        delay_ms = 0.0
        decided = None
        with self._lock:
            for rule in self._rules:
                if rule.mode != "latency" and decided is not None:
                    continue
                if not rule.matches(phone_number_id, to, wa_id, route) or self._rng.random() >= rule.rate:
                    continue
                if rule.remaining is not None:
                    rule.remaining -= 1
                if rule.mode == "latency":
                    delay_ms += rule.params["ms"] + self._rng.uniform(0, rule.params["jitter_ms"])
                else:
                    decided = rule
        return FaultDecision(delay_ms / 1000, decided)


_NO_FAULT = FaultDecision(0.0, None)


def parse_rules(rules: list[dict[str, Any]]) -> list[FaultRule]:
    if not isinstance(rules, (list, tuple)):
        raise ValueError("faults must be a list of rules")
    parsed = []
    for i, rule in enumerate(rules):
        try:
            parsed.append(FaultRule.from_dict(rule))
        except ValueError as exc:
            raise ValueError(f"fault rule {i}: {exc}") from None
    return parsed


def _check_param(mode: str, name: str, value: Any) -> Any:
    if name in ("ms", "jitter_ms", "retry_after"):
        if value is None and name == "retry_after":
            return None
        if not _is_number(value) or value < 0:
            raise ValueError(f"{name} must be a non-negative number")
        return value
    if name in ("code", "subcode"):
        if value is None and name == "subcode":
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{name} must be an integer")
        return value
    if name == "status" or (name == "http_status" and value is not None):
        low = 500 if mode == "http_error" else 400
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= 599:
            raise ValueError(f"{name} must be an HTTP status from {low} to 599")
        return value
    if name == "body":
        if value not in ("html", "empty"):
            raise ValueError('body must be "html" or "empty"')
        return value
    if name == "details" and value is not None and not isinstance(value, str):
        raise ValueError("details must be a string")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
